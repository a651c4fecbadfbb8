/*
 * runtime/model/tp_rank.c: the hooks a tensor-parallel rank's forward pass calls (see tp.h):
 * its scratch, the vocabulary-split embedding and classifier, the all-reduce. Below
 * forward.c; the group that makes the ranks (tp.c) sits above it.
 */
#include <stdlib.h>
#include <string.h>

#include "runtime/model/model_impl.h"
#include "runtime/model/tp.h"

int sd_tp_rank_bind(sd_tp_rank *r, sd_backend *be, int32_t n_batch, int32_t n_outputs,
                    sd_error *err) {
    const sd_model *m = r->m;
    const sd_model *s = r->shard;
    r->be = be;
    const size_t n_embd = (size_t)m->hp.n_embd, nvr = (size_t)s->output.rows;
    int rc = sd_buffer_alloc(be, (size_t)n_batch * n_embd * sizeof(float), SD_BUFFER_COMPUTE,
                             &r->zero, err);
    if (!rc)
        rc = sd_buffer_alloc(be, (size_t)n_outputs * nvr * sizeof(float), SD_BUFFER_OUTPUT, &r->lg,
                             err);
    if (rc) return sd_error_prefix(err, rc, "%s: tensor-parallel scratch", m->path);
    r->stage = malloc((size_t)n_outputs * nvr * sizeof(float));
    r->ids = malloc((size_t)n_batch * sizeof(int32_t));
    if (!r->stage || !r->ids)
        return sd_errorf(err, SD_ERR_OOM, "%s: tensor-parallel scratch: out of memory", m->path);
    return SD_OK;
}

void sd_tp_rank_unbind(sd_tp_rank *r) {
    if (!r) return;
    sd_buffer_free(r->zero);
    sd_buffer_free(r->lg);
    free(r->stage);
    free(r->ids);
    r->zero = r->lg = NULL;
    r->stage = NULL;
    r->ids = NULL;
    r->be = NULL;
}

void sd_tp_allreduce(sd_tp_rank *r, float *x, int64_t n) {
    sd_comm_allreduce(*r->comm, r->rank, x, n);
}

void sd_tp_embed(sd_tp_rank *r, const sd_weight *emb, const int32_t *ids, int32_t n, int32_t n_embd,
                 float *x) {
    sd_backend *be = r->be;
    const int32_t v0 = r->v0, v1 = r->v0 + (int32_t)emb->rows;
    /* Runs of consecutive tokens that this rank owns (one get_rows) or not (zeros). */
    for (int32_t i = 0; i < n;) {
        const int own = ids[i] >= v0 && ids[i] < v1;
        int32_t j = i;
        while (j < n && (ids[j] >= v0 && ids[j] < v1) == own) {
            r->ids[j - i] = ids[j] - v0;
            j++;
        }
        float *xi = x + (size_t)i * (size_t)n_embd;
        if (own)
            be->ops->get_rows(be, emb, r->ids, j - i, xi);
        else
            be->ops->copy(be, xi, r->zero->addr, (int64_t)(j - i) * n_embd);
        i = j;
    }
    sd_tp_allreduce(r, x, (int64_t)n * n_embd);
}

int sd_tp_output(sd_tp_rank *r, const sd_weight *out, const float *xn, int32_t w, int32_t n_vocab,
                 float *logits, sd_error *err) {
    sd_backend *be = r->be;
    const size_t nvr = (size_t)out->rows;
    be->ops->matmul(be, out, xn, w, r->lg->addr);
    int rc = be->ops->read(be, r->stage, r->lg->addr, (size_t)w * nvr * sizeof(float), err);
    if (rc) return rc;
    for (int32_t j = 0; j < w; j++)
        memcpy(logits + (size_t)j * (size_t)n_vocab + r->v0, r->stage + (size_t)j * nvr,
               nvr * sizeof(float));
    return SD_OK;
}
