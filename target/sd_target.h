/*
 * target/: the scorer. Owns the target's session. May include runtime/base and
 * runtime/model (SD_MAX_DRAFT, the longest draft, is runtime/base's).
 * Wraps the target model's session and keeps its KV cache in
 * step with the committed context: the cache holds every committed token except the
 * last, so one verification pass evaluates [last committed, draft_1 .. draft_K] and
 * returns K + 1 logits rows: row i scores the token after draft_1..draft_i (row 0
 * the token after the committed context, row K the bonus position).
 * (vLLM spec_decode "scorer"; Leviathan et al. 2023 Alg. 1 "run M_p in parallel".)
 */
#ifndef SD_TARGET_H
#define SD_TARGET_H

#include <stdint.h>

#include "runtime/model/sd_model.h"
#include "runtime/base/sd_base.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct sd_scorer sd_scorer;

/*
 * Create a scorer over model m (not owned; must outlive the scorer). p->n_batch must be
 * >= SD_MAX_DRAFT + 1 (prompts longer than n_batch are prefilled in chunks).
 * Errors: as sd_session_init.
 */
int sd_scorer_init(const sd_model *m, const sd_session_params *p, sd_scorer **out, sd_error *err);
/* The target's session (for sd_session_params.share_threads: a draft on its threads). */
const sd_session *sd_scorer_session(const sd_scorer *s);
void sd_scorer_free(sd_scorer *s); /* NULL accepted */
/* Context shift of the target's cache without recomputing (sd_session_seq_shift): positions
 * [n_keep, n_keep + n_discard) dropped, the later keys re-rotated. Errors: as that. */
int sd_scorer_shift(sd_scorer *s, int32_t n_keep, int32_t n_discard, sd_error *err);

const sd_model *sd_scorer_model(const sd_scorer *s);
int32_t sd_scorer_n_ctx(const sd_scorer *s);

/*
 * Bring the KV cache to ctx[0 .. n_ctx - 1) (everything but the last committed token):
 * keeps the longest common prefix with what is cached, rolls back the rest (O(1)) and
 * evaluates the missing tokens in batches without logits. Used for prefill and after
 * each verification. Errors: SD_ERR_CONTEXT, SD_ERR_ARG (n_ctx < 1, bad id).
 */
int sd_scorer_sync(sd_scorer *s, const int32_t *ctx, int32_t n_ctx, sd_error *err);

/*
 * Verification pass: sync to ctx, then evaluate [ctx[n_ctx - 1], draft[0 .. k)] in one
 * batched forward pass.
 *   ctx    : int32 [n_ctx], n_ctx >= 1 (the committed tokens: prompt + emitted)
 *   draft  : int32 [k], 0 <= k <= SD_MAX_DRAFT (k = 0 is a plain decode step)
 *   logits : float [k + 1, n_vocab] (out)
 * Errors: SD_ERR_CONTEXT when n_ctx + k exceeds the context (state unchanged except a
 * possible rollback to the common prefix), SD_ERR_ARG, SD_ERR_FORMAT when a logit of the
 * k + 1 rows is NaN or inf (message names the model: its weights are corrupt).
 */
int sd_scorer_score(sd_scorer *s, const int32_t *ctx, int32_t n_ctx, const int32_t *draft,
                    int32_t k, float *logits, sd_error *err);

/* SD_ERR_FORMAT naming m and the first non-finite logit of rows [n_rows, n_vocab of m]
 * (m's weights are corrupt), else SD_OK: the check sd_scorer_score makes on its rows, for
 * a caller that scores several sequences itself (the batcher). */
int sd_target_check_rows(const sd_model *m, const float *rows, int32_t n_rows, sd_error *err);

/*
 * KV commit after verification: roll the cache back to the committed context
 * ctx[0 .. n_ctx - 1) (rejected draft tokens leave; accepted ones stay, already
 * evaluated). In SD_CHECKS builds aborts if the cache then differs from exactly those
 * tokens at positions [0, n_ctx - 1).
 */
void sd_scorer_commit(sd_scorer *s, const int32_t *ctx, int32_t n_ctx);

/*
 * Tree verification pass (runtime/model: sd_session_seq_decode_tree): sync to ctx, then one
 * pass over the root ctx[n_ctx - 1] and the n drafted nodes (node i: token tokens[i],
 * parent parent[i], -1 = the root), each node attending to the context and its ancestors
 * only, at position n_ctx - 1 + its depth.
 *   tokens, parent : int32 [n], 0 <= n <= SD_MAX_DRAFT, parent[i] in -1 .. i - 1
 *   logits         : float [n + 1, n_vocab] (out): row 0 after the committed context, row
 *                    i + 1 after node i's path
 * Errors: as sd_scorer_score, and SD_ERR_UNSUPPORTED where the session has no tree pass
 * (a CUDA target: its message says so). Afterwards the cache holds the n + 1 rows of the
 * pass: sd_scorer_commit_tree keeps the accepted path.
 */
int sd_scorer_score_tree(sd_scorer *s, const int32_t *ctx, int32_t n_ctx, const int32_t *tokens,
                         const int32_t *parent, int32_t n, float *logits, sd_error *err);

/*
 * KV commit after a tree pass scored at n_ctx_scored committed tokens: the rows of the
 * accepted nodes path[0 .. n_path) (the verifier's path, root first) move to follow the
 * root, the rest are dropped, then as sd_scorer_commit(ctx, n_ctx) (ctx: the committed
 * tokens after the pass, whose accepted tokens are the path's).
 */
void sd_scorer_commit_tree(sd_scorer *s, int32_t n_ctx_scored, const int32_t *path, int32_t n_path,
                           const int32_t *ctx, int32_t n_ctx);

#ifdef __cplusplus
}
#endif
#endif /* SD_TARGET_H */
