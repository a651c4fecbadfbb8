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
 * host region per rank, then placed on the rank's backend as usual) with four hooks:
 * sd_tp_embed, sd_tp_allreduce (twice per layer), sd_tp_output. The user's handle is rank
 * 0's session; its decode and truncate fan out to every rank (sd_tp_decode, sd_tp_truncate).
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

typedef struct sd_tp sd_tp;           /* a group of ranks (owns sessions, threads, comm) */
typedef struct sd_tp_rank sd_tp_rank; /* one rank's part of the group */

/* sd_session_init for p->n_split != 0: the returned session is rank 0's, the group's
 * handle. Errors: SD_ERR_ARG (a split the model's shape does not allow, with the reason),
 * SD_ERR_UNSUPPORTED (fewer devices than ranks, NCCL missing), and sd_session_init's. */
int sd_tp_session_init(const sd_model *m, const sd_session_params *p, sd_session **out,
                       sd_error *err);
/* Run the batch on every rank (rank 0 on the calling thread); on error every rank is left
 * as it was before the call. */
int sd_tp_decode(sd_tp *g, const sd_batch *b, int32_t n_last, float *logits, sd_error *err);
int sd_tp_truncate(sd_tp *g, int32_t n_keep, sd_error *err);
const sd_model *sd_tp_model(const sd_tp *g); /* the unsharded model */
void sd_tp_free(sd_tp *g);                   /* every rank's session, shards, threads */

/* ---- hooks of a rank's forward pass (forward.c) ---- */

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
