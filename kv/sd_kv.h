/*
 * kv/: the KV cache bookkeeping, per model session, all layers, one sequence (seq 0) for
 * now. Owns the committed length and, when it allocated it, the storage. May include
 * runtime/base and quant (element types) only. The storage may be backend memory (a
 * device address): this part only computes row addresses and never dereferences the
 * storage it was given.
 *
 * Layout today: per layer, K and V are contiguous [n_ctx, kv_dim] rows of the cache's
 * element type (kv_dim = n_head_kv * head_dim), so position p of layer l is one row.
 * Element types: SD_TYPE_F32 (4 bytes, exact) or SD_TYPE_F16 (IEEE binary16, 2 bytes:
 * half the memory and half the bytes attention reads; K/V values are rounded to
 * nearest-even when stored, and readers convert them back to f32). Callers reach
 * rows only through sd_kv_k / sd_kv_v (never by pointer arithmetic across positions
 * beyond the span returned), which is what lets paged blocks come later without
 * touching the forward pass: a paged cache returns per-block spans.
 *
 * Contract (positions are 0-based, contiguous, starting at 0):
 *   n = sd_kv_n(kv) positions [0, n) hold committed K/V.
 *   sd_kv_reserve(kv, m) checks that [n, n + m) fits; the forward pass then writes
 *   those rows and calls sd_kv_commit(kv, m), making n += m.
 *   sd_kv_truncate(kv, n') with n' <= n drops positions [n', n) in O(1) (no copy; the
 *   rows are simply overwritten by later appends). This is the rollback after a
 *   rejected draft: llama.cpp's llama_kv_cache_seq_rm(seq, n', -1).
 */
#ifndef SD_KV_H
#define SD_KV_H

#include <stddef.h>
#include <stdint.h>

#include "quant/sd_quant.h"
#include "runtime/base/sd_base.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct sd_kv sd_kv;

typedef struct sd_kv_params {
    int32_t n_layer;
    int32_t n_ctx;  /* capacity in positions */
    int32_t kv_dim; /* n_head_kv * head_dim */
    sd_type type;   /* element type: SD_TYPE_F32 (0, the default) or SD_TYPE_F16 */
    /* Storage of sd_kv_storage_bytes(p) bytes (K rows of every layer, then V rows), e.g. a
     * backend buffer, not owned, zeroed by its owner; NULL: the cache allocates (zeroed)
     * host memory itself. */
    void *storage;
} sd_kv_params;

/* Bytes of storage a cache for p needs (2 * n_layer * n_ctx * kv_dim elements of p->type,
 * overflow-checked). Errors: as sd_kv_init. */
int sd_kv_storage_bytes(const sd_kv_params *p, size_t *out, sd_error *err);

/* Make a cache over p->storage (or allocated host memory). Errors: SD_ERR_ARG
 * (non-positive or too large sizes, a type other than F32 / F16), SD_ERR_OOM. */
int sd_kv_init(const sd_kv_params *p, sd_kv **out, sd_error *err);
void sd_kv_free(sd_kv *kv); /* NULL accepted */

int32_t sd_kv_n(const sd_kv *kv);        /* committed positions */
int32_t sd_kv_capacity(const sd_kv *kv); /* n_ctx */
sd_type sd_kv_type(const sd_kv *kv);     /* element type of the rows */
int32_t sd_kv_dim(const sd_kv *kv);      /* elements per row */
size_t sd_kv_row_bytes(const sd_kv *kv); /* kv_dim * element size */

/* Check that m more positions fit. SD_ERR_CONTEXT if n + m > n_ctx (state unchanged). */
int sd_kv_reserve(const sd_kv *kv, int32_t m, sd_error *err);
/* Mark m reserved positions as written: n += m (m must have been reserved). */
void sd_kv_commit(sd_kv *kv, int32_t m);
/* Drop positions [n', n). SD_ERR_ARG if n' < 0 or n' > n (state unchanged). O(1). */
int sd_kv_truncate(sd_kv *kv, int32_t n_keep, sd_error *err);

/* Row of K (resp. V) for layer l at position pos: kv_dim elements of sd_kv_type(kv)
 * (float[kv_dim] for F32, uint16_t[kv_dim] binary16 for F16). pos < capacity. The rows
 * of positions [pos, pos + sd_kv_span(kv, pos)) are contiguous, sd_kv_row_bytes(kv)
 * bytes apart. */
void *sd_kv_k(sd_kv *kv, int32_t layer, int32_t pos);
void *sd_kv_v(sd_kv *kv, int32_t layer, int32_t pos);
int32_t sd_kv_span(const sd_kv *kv, int32_t pos);

#ifdef __cplusplus
}
#endif
#endif /* SD_KV_H */
