/*
 * runtime/model/tp.h: PRIVATE to runtime/model. Tensor parallelism (tp.c): a target split
 * over N ranks Megatron-style (Shoeybi et al. 2019), one backend and one thread per rank:
 *   - Q/K/V column-parallel by heads (rank r: KV heads [r H_kv/N, (r+1) H_kv/N) and their
 *     query heads), gate/up column-parallel by FFN columns: each rank computes its rows;
 *   - attention output and down row-parallel (the matching column slices), each followed
 *     by a fixed-order sum all-reduce (sd_comm, runtime/backend/sd_backend.h);
 *   - the embedding split by vocabulary (each token's row comes from the rank that owns it,
 *     zeros elsewhere, then the all-reduce: exact), the classifier split by vocabulary (each
 *     rank writes its columns of the caller's logits rows);
 *   - the KV cache sharded by KV heads (each rank's session caches its heads).
 * Each rank is an ordinary session (forward.c) over a shard model (weights copied into one
 * host region per rank, then placed on the rank's backend as usual) with four hooks
 * (tp_rank.c, below forward.c): sd_tp_embed, sd_tp_allreduce (twice per layer),
 * sd_tp_output. The user's handle is rank 0's session; the group (tp.c, above forward.c)
 * gives it the fan-out to every rank (sd_session_group_ops) of decode, token-tree passes and
 * every call that changes the KV state (truncate, the seq_* calls: fork, prefix attach and
 * store, tree keep, cache clear), so the forward pass never calls the group. A paged
 * session (n_seq > 0) pages every rank's cache alike: each rank's pool sees the same calls
 * in the same order, so their blocks stay in step (what each rank answers is compared).
 *
 * Numerics: every column-parallel output and the embedding are bit-identical to the
 * unsharded pass; each row-parallel output is the sum of N partial dot products in rank
 * order instead of one dot product, so the logits differ from the unsharded ones by float
 * reassociation only (tests/test_tp.c states the tolerance), and N = 1 is bit-identical. The
 * all-reduce's order does not depend on n_tok, so a sharded verification pass is still
 * bit-identical to sharded single-token steps (greedy speculative == target alone).
 */
#ifndef SD_MODEL_TP_H
#define SD_MODEL_TP_H

#include "runtime/backend/sd_backend.h"
#include "runtime/model/sd_model.h"

typedef struct sd_tp sd_tp; /* a group of ranks (owns sessions, threads, comm) */

/* One rank's part of the group: what its forward-pass hooks (tp_rank.c) read. */
typedef struct sd_tp_rank {
    const sd_model *m;     /* the unsharded model */
    const sd_model *shard; /* this rank's shard (owned by the group) */
    sd_comm *const *comm;  /* the group's all-reduce (made after every rank's session) */
    int32_t rank;
    int32_t v0;      /* first vocabulary row this rank owns */
    sd_backend *be;  /* the rank's session's backend (bound by sd_tp_rank_bind) */
    sd_buffer *zero; /* [n_batch, n_embd] zeros: embedding rows of tokens owned elsewhere */
    sd_buffer *lg;   /* [n_outputs, n_vocab_rank] the rank's logits columns */
    float *stage;    /* host copy of lg */
    int32_t *ids;    /* [n_batch] host: ids remapped into the rank's rows */
} sd_tp_rank;

/* sd_session_init for p->n_split != 0 (session.c): the returned session is rank 0's, the
 * group's handle; its decode and KV calls fan out to every rank (rank 0 on the calling
 * thread; a failed decode leaves every rank as it was before the call), its free frees every
 * rank's session, the shards and the threads. Errors: SD_ERR_ARG (a split the model's shape
 * does not allow, with the reason), SD_ERR_UNSUPPORTED (fewer devices than ranks, NCCL
 * missing), and sd_session_init's. */
int sd_tp_session_init(const sd_model *m, const sd_session_params *p, sd_session **out,
                       sd_error *err);
/* What sd_tp_session_init checks before it makes anything: the split the model's shape
 * allows and the devices it needs; *n_ranks: the ranks (p->n_split, or every device's for
 * -1). Its errors. */
int sd_tp_check(const sd_model *m, const sd_session_params *p, int32_t *n_ranks, sd_error *err);

/* ---- hooks of a rank's forward pass (forward.c), in tp_rank.c ---- */

/* After the rank's backend exists: its scratch (zeros for the embedding, local logits). */
int sd_tp_rank_bind(sd_tp_rank *r, sd_backend *be, int32_t n_batch, int32_t n_outputs,
                    sd_error *err);
void sd_tp_rank_unbind(sd_tp_rank *r); /* before the backend is freed */
/* x [n, n_embd] = embedding rows of ids[0 .. n) (host), all-reduced over the ranks. */
void sd_tp_embed(sd_tp_rank *r, const sd_weight *emb, const int32_t *ids, int32_t n, int32_t n_embd,
                 float *x);
/* The fixed-order sum all-reduce of x [n] over the ranks. */
void sd_tp_allreduce(sd_tp_rank *r, float *x, int64_t n);
/* Classifier over the w normed rows xn [w, n_embd] into this rank's columns
 * [v0, v0 + out->rows) of the host logits [w, n_vocab]; syncs the rank's backend. */
int sd_tp_output(sd_tp_rank *r, const sd_weight *out, const float *xn, int32_t w, int32_t n_vocab,
                 float *logits, sd_error *err);

#endif /* SD_MODEL_TP_H */
