/*
 * runtime/model/tp.c: tensor parallelism over N ranks (see tp.h): the shard models, the
 * group's rank threads (one per rank beyond rank 0, which runs on the caller's thread; for
 * GPUs this is "one thread per GPU" with ncclCommInitAll, sd_comm), and the forward-pass
 * hooks. Threads are made once, at init; a call hands every rank the same job and waits for
 * all of them, so the decode loop allocates nothing.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/model/model_impl.h"
#include "runtime/model/tp.h"

#define SD_TP_MAX_RANKS 64
#define SD_TP_ALIGN     64 /* alignment of each matrix in a shard's region */

enum { JOB_DECODE = 1, JOB_EACH, JOB_EXIT };

struct sd_tp {
    const sd_model *m; /* unsharded */
    int32_t n;
    sd_comm *comm;
    sd_model shard[SD_TP_MAX_RANKS];
    sd_tp_rank rank[SD_TP_MAX_RANKS];
    sd_session *sess[SD_TP_MAX_RANKS];
    /* rank threads 1 .. n-1 */
    pthread_t th[SD_TP_MAX_RANKS];
    int n_threads; /* started */
    pthread_mutex_t mu;
    pthread_cond_t cv_job, cv_done;
    uint64_t seq; /* job number */
    int32_t n_done;
    /* the current job */
    int kind;
    const sd_batch *b;
    int32_t n_last;
    const int32_t *parent; /* a token tree's, or NULL */
    float *logits;
    sd_session_rank_fn fn; /* JOB_EACH: fn(rank's session, arg, &value[r]) */
    void *arg;
    int32_t value[SD_TP_MAX_RANKS];
    int rc[SD_TP_MAX_RANKS];
    sd_error err[SD_TP_MAX_RANKS];
};

/* ---- shards ---- */

static size_t align_up(size_t x) {
    return (x + SD_TP_ALIGN - 1) & ~(size_t)(SD_TP_ALIGN - 1);
}

/* Bytes of elements [c0, c0 + nc) of a row of type t (c0, nc multiples of the block). */
static size_t col_bytes(sd_type t, int64_t n) {
    return (size_t)(n / sd_type_block_elems(t)) * sd_type_block_bytes(t);
}

/* Shard matrix: rows [r0, r0 + nr) and columns [c0, c0 + nc) of w, copied to dst (NULL:
 * only size it). Returns the bytes. */
static size_t slice(const sd_weight *w, int64_t r0, int64_t nr, int64_t c0, int64_t nc,
                    uint8_t *dst, sd_weight *out) {
    const size_t rb = col_bytes(w->type, nc), off = col_bytes(w->type, c0);
    if (dst) {
        for (int64_t r = 0; r < nr; r++)
            memcpy(dst + (size_t)r * rb,
                   (const uint8_t *)w->data + (size_t)(r0 + r) * w->row_bytes + off, rb);
        out->type = w->type;
        out->rows = nr;
        out->cols = nc;
        out->row_bytes = rb;
        out->data = dst;
        out->layout = SD_LAYOUT_ROWS;
    }
    return rb * (size_t)nr;
}

/* Place the shard matrix (rows [r0, r0 + nr), columns [c0, c0 + nc) of w) at offset off of
 * the region dst (NULL: only size it); returns the next matrix's (aligned) offset. */
static size_t put(uint8_t *dst, size_t off, const sd_weight *w, int64_t r0, int64_t nr, int64_t c0,
                  int64_t nc, sd_weight *out) {
    return align_up(off + slice(w, r0, nr, c0, nc, dst ? dst + off : NULL, out));
}

/* Lay out (dst == NULL: size) or fill rank r's matrices into s; returns the region's bytes. */
static size_t shard_layout(const sd_model *m, int32_t n, int32_t r, uint8_t *dst, sd_model *s) {
    const sd_hparams *hp = &m->hp;
    const int64_t e = hp->n_embd, qr = (int64_t)hp->n_head / n * hp->head_dim,
                  kvr = (int64_t)hp->n_head_kv / n * hp->head_dim, ff = hp->n_ff / n,
                  nv = hp->n_vocab;
    const int64_t v0 = nv * r / n, v1 = nv * (r + 1) / n;
    sd_weight scratch; /* the destination while only sizing */
    size_t off = 0;
    for (int32_t l = 0; l < hp->n_layer; l++) {
        const sd_layer *L = &m->layers[l];
        sd_layer *S = dst ? &s->layers[l] : NULL;
        off = put(dst, off, &L->wq, qr * r, qr, 0, e, S ? &S->wq : &scratch);
        off = put(dst, off, &L->wk, kvr * r, kvr, 0, e, S ? &S->wk : &scratch);
        off = put(dst, off, &L->wv, kvr * r, kvr, 0, e, S ? &S->wv : &scratch);
        off = put(dst, off, &L->wo, 0, e, qr * r, qr, S ? &S->wo : &scratch);
        off = put(dst, off, &L->w_gate, ff * r, ff, 0, e, S ? &S->w_gate : &scratch);
        off = put(dst, off, &L->w_down, 0, e, ff * r, ff, S ? &S->w_down : &scratch);
        off = put(dst, off, &L->w_up, ff * r, ff, 0, e, S ? &S->w_up : &scratch);
        if (S) {
            S->attn_norm = L->attn_norm;
            S->ffn_norm = L->ffn_norm;
            S->q_norm = L->q_norm; /* per head: every rank's heads use the same weights */
            S->k_norm = L->k_norm;
            S->attn_post_norm = L->attn_post_norm; /* after the all-reduce: whole rows */
            S->ffn_post_norm = L->ffn_post_norm;
            S->swa = L->swa;
        }
    }
    off = put(dst, off, &m->tok_embd, v0, v1 - v0, 0, e, dst ? &s->tok_embd : &scratch);
    if (!m->tied)
        off = put(dst, off, &m->output, v0, v1 - v0, 0, e, dst ? &s->output : &scratch);
    else if (dst)
        s->output = s->tok_embd;
    return off;
}

/* The reasons a model cannot be split n ways, or SD_OK. */
static int check_split(const sd_model *m, int32_t n, sd_error *err) {
    const sd_hparams *hp = &m->hp;
    const char *path = m->path;
    if (n < 1 || n > SD_TP_MAX_RANKS)
        return sd_errorf(err, SD_ERR_ARG, "%s: tensor split %d: expected 1..%d ranks", path, n,
                         SD_TP_MAX_RANKS);
    if (hp->qkv_bias && n > 1)
        return sd_errorf(err, SD_ERR_UNSUPPORTED,
                         "%s: tensor split %d: %s's Q/K/V biases are not sharded yet (run it "
                         "on one device)",
                         path, n, hp->arch);
    if (hp->n_head_kv % n)
        return sd_errorf(err, SD_ERR_ARG,
                         "%s: tensor split %d: n_head_kv %d is not divisible by %d (each rank "
                         "holds whole KV heads)",
                         path, n, hp->n_head_kv, n);
    if (hp->n_ff % n)
        return sd_errorf(err, SD_ERR_ARG, "%s: tensor split %d: n_ff %d is not divisible by %d",
                         path, n, hp->n_ff, n);
    if (hp->n_vocab < n)
        return sd_errorf(err, SD_ERR_ARG, "%s: tensor split %d: only %d vocabulary rows", path, n,
                         hp->n_vocab);
    /* Row-parallel matrices are cut between columns: at block boundaries. */
    for (int32_t l = 0; l < hp->n_layer; l++) {
        const sd_weight *rw[2] = {&m->layers[l].wo, &m->layers[l].w_down};
        const int64_t width[2] = {(int64_t)hp->n_head / n * hp->head_dim, hp->n_ff / n};
        for (int i = 0; i < 2; i++)
            if (width[i] % sd_type_block_elems(rw[i]->type))
                return sd_errorf(err, SD_ERR_ARG,
                                 "%s: tensor split %d: layer %d's %s is %s and its %lld-column "
                                 "slices are not whole blocks of %lld",
                                 path, n, l, i ? "ffn_down" : "attn_output",
                                 sd_type_name((uint32_t)rw[i]->type), (long long)width[i],
                                 (long long)sd_type_block_elems(rw[i]->type));
    }
    return SD_OK;
}

static int make_shard(const sd_model *m, int32_t n, int32_t r, sd_model *s, sd_error *err) {
    *s = *m; /* path, gguf, vocab, norms: shared with m, never freed through s */
    s->hp.n_head = m->hp.n_head / n;
    s->hp.n_head_kv = m->hp.n_head_kv / n;
    s->hp.n_ff = m->hp.n_ff / n; /* n_embd, head_dim, n_vocab (the batch's id range) stay */
    s->layers = calloc((size_t)m->hp.n_layer, sizeof *s->layers);
    const size_t bytes = shard_layout(m, n, r, NULL, NULL);
    void *data = NULL;
    if (!s->layers || posix_memalign(&data, SD_TP_ALIGN, bytes ? bytes : SD_TP_ALIGN) != 0) {
        free(s->layers);
        s->layers = NULL;
        return sd_errorf(err, SD_ERR_OOM,
                         "%s: tensor split: out of host memory (%zu bytes, rank %d)", m->path,
                         bytes, r);
    }
    shard_layout(m, n, r, data, s);
    s->shard_data = data;
    s->shard_bytes = bytes;
    s->weight_bytes = bytes;
    return SD_OK;
}

static void free_shard(sd_model *s) {
    free(s->layers);
    free((void *)s->shard_data);
    s->layers = NULL;
    s->shard_data = NULL;
}

/* ---- rank threads ---- */

static void run_job(sd_tp *g, int32_t r) {
    sd_error_clear(&g->err[r]);
    switch (g->kind) {
    case JOB_DECODE:
        g->rc[r] =
            sd_session_decode_rank(g->sess[r], g->b, g->n_last, g->parent, g->logits, &g->err[r]);
        break;
    case JOB_EACH:
        g->value[r] = 0;
        g->rc[r] = g->fn(g->sess[r], g->arg, &g->value[r], &g->err[r]);
        break;
    default:
        g->rc[r] = SD_OK;
    }
}

typedef struct rank_arg {
    sd_tp *g;
    int32_t r;
} rank_arg;

static void *rank_main(void *p) {
    sd_tp *g = ((rank_arg *)p)->g;
    const int32_t r = ((rank_arg *)p)->r;
    free(p);
    uint64_t seen = 0;
    for (;;) {
        pthread_mutex_lock(&g->mu);
        while (g->seq == seen)
            pthread_cond_wait(&g->cv_job, &g->mu);
        seen = g->seq;
        const int kind = g->kind;
        pthread_mutex_unlock(&g->mu);
        if (kind == JOB_EXIT) return NULL;
        run_job(g, r);
        pthread_mutex_lock(&g->mu);
        if (++g->n_done == g->n - 1) pthread_cond_signal(&g->cv_done);
        pthread_mutex_unlock(&g->mu);
    }
}

/* Every rank runs the job set in g (rank 0 here); returns when all are done. */
static void run_all(sd_tp *g, int kind) {
    pthread_mutex_lock(&g->mu);
    g->kind = kind;
    g->n_done = 0;
    g->seq++;
    pthread_cond_broadcast(&g->cv_job);
    pthread_mutex_unlock(&g->mu);
    run_job(g, 0);
    pthread_mutex_lock(&g->mu);
    while (g->n_done < g->n - 1)
        pthread_cond_wait(&g->cv_done, &g->mu);
    pthread_mutex_unlock(&g->mu);
}

/* The first failing rank's error, prefixed with its rank. */
static int first_error(sd_tp *g, sd_error *err) {
    for (int32_t r = 0; r < g->n; r++)
        if (g->rc[r] != SD_OK) {
            if (err) *err = g->err[r];
            return g->n > 1 ? sd_error_prefix(err, g->rc[r], "tensor-parallel rank %d", r)
                            : g->rc[r];
        }
    return SD_OK;
}

static int tp_decode(sd_tp *g, const sd_batch *b, int32_t n_last, const int32_t *parent,
                     float *logits, sd_error *err) {
    g->b = b;
    g->n_last = n_last;
    g->parent = parent;
    g->logits = logits;
    run_all(g, JOB_DECODE);
    g->b = NULL;
    g->parent = NULL;
    int rc = first_error(g, err);
    if (rc != SD_OK) /* keep the ranks in step: undo the ranks that succeeded */
        for (int32_t r = 0; r < g->n; r++)
            if (g->rc[r] == SD_OK) sd_session_undo_rank(g->sess[r]);
    return rc;
}

/* fn on every rank. The ranks must agree on its status and its value (their pools in
 * step): a rank failing alone (a device error) is reported as its error; ranks that succeed
 * with different answers are a bug, reported by name. */
static int tp_each(sd_tp *g, sd_session_rank_fn fn, void *arg, int32_t *value, sd_error *err) {
    g->fn = fn;
    g->arg = arg;
    run_all(g, JOB_EACH);
    g->fn = NULL;
    g->arg = NULL;
    *value = g->value[0];
    for (int32_t r = 1; r < g->n; r++) {
        if (g->rc[r] != g->rc[0]) {
            const int rc = first_error(g, err);
            return sd_error_prefix(err, rc, "tensor split %d: ranks out of step", g->n);
        }
        if (g->rc[0] == SD_OK && g->value[r] != g->value[0]) {
            SD_CHECK(0, "tensor-parallel ranks out of step");
            return sd_errorf(err, SD_ERR_ARG,
                             "tensor split %d: ranks out of step: rank %d answered %d, rank 0 %d",
                             g->n, r, g->value[r], g->value[0]);
        }
    }
    if (g->rc[0] != SD_OK && err) *err = g->err[0]; /* every rank failed alike */
    return g->rc[0];
}

static const sd_model *tp_model(const sd_tp *g) {
    return g->m;
}

static void tp_free(sd_tp *g) {
    if (!g) return;
    if (g->n_threads > 0) {
        pthread_mutex_lock(&g->mu);
        g->kind = JOB_EXIT;
        g->seq++;
        pthread_cond_broadcast(&g->cv_job);
        pthread_mutex_unlock(&g->mu);
        for (int i = 0; i < g->n_threads; i++)
            pthread_join(g->th[i + 1], NULL);
    }
    sd_comm_free(g->comm); /* before the backends it synchronizes */
    for (int32_t r = 0; r < g->n; r++)
        sd_session_free(g->sess[r]); /* rank 0's group link was cleared by sd_session_free */
    for (int32_t r = 0; r < g->n; r++)
        free_shard(&g->shard[r]);
    pthread_cond_destroy(&g->cv_done);
    pthread_cond_destroy(&g->cv_job);
    pthread_mutex_destroy(&g->mu);
    free(g);
}

/* What rank 0's session (the group's handle) calls for the whole group. */
static const sd_session_group_ops group_ops = {tp_decode, tp_each, tp_model, tp_free};

int sd_tp_check(const sd_model *m, const sd_session_params *p, int32_t *n_ranks, sd_error *err) {
    int32_t n = p->n_split;
    *n_ranks = 0;
    if (n < 0) { /* every device present */
        int rc = sd_backend_device_count(p->device, &n, err);
        if (rc) return sd_error_prefix(err, rc, "%s: tensor split over every device", m->path);
    }
    int rc = check_split(m, n, err);
    if (rc) return rc;
    int32_t n_dev = 0;
    if ((rc = sd_backend_device_count(p->device, &n_dev, err)))
        return sd_error_prefix(err, rc, "%s: tensor split %d", m->path, n);
    if (p->device != SD_DEVICE_CPU && n_dev < n)
        return sd_errorf(err, SD_ERR_UNSUPPORTED, "%s: tensor split %d: only %d %s devices",
                         m->path, n, n_dev, sd_device_name(p->device));
    *n_ranks = n;
    return SD_OK;
}

int sd_tp_session_init(const sd_model *m, const sd_session_params *p, sd_session **out,
                       sd_error *err) {
    *out = NULL;
    int32_t n = 0;
    int rc = sd_tp_check(m, p, &n, err);
    if (rc) return rc;
    sd_tp *g = calloc(1, sizeof *g);
    if (!g) return sd_errorf(err, SD_ERR_OOM, "tensor split: out of memory");
    g->m = m;
    g->n = n;
    pthread_mutex_init(&g->mu, NULL);
    pthread_cond_init(&g->cv_job, NULL);
    pthread_cond_init(&g->cv_done, NULL);
    sd_session_params rp = *p;
    rp.n_split = 0;
    if (p->device == SD_DEVICE_CPU) { /* the ranks share the cores */
        const int32_t cores = p->n_threads ? p->n_threads : sd_n_cores();
        rp.n_threads = cores / n > 0 ? cores / n : 1;
    }
    for (int32_t r = 0; r < n && !rc; r++) {
        g->rank[r].m = m;
        g->rank[r].shard = &g->shard[r];
        g->rank[r].comm = &g->comm;
        g->rank[r].rank = r;
        g->rank[r].v0 = (int32_t)((int64_t)m->hp.n_vocab * r / n);
        rc = make_shard(m, n, r, &g->shard[r], err);
        if (!rc)
            rc = sd_session_init_rank(&g->shard[r], &rp, &g->rank[r],
                                      p->device == SD_DEVICE_CPU ? 0 : r, &g->sess[r], err);
        if (rc && n > 1) sd_error_prefix(err, rc, "tensor-parallel rank %d", r);
    }
    if (!rc) {
        sd_backend *bes[SD_TP_MAX_RANKS];
        for (int32_t r = 0; r < n; r++)
            bes[r] = g->rank[r].be;
        const int64_t max_elems = (int64_t)sd_session_n_batch(g->sess[0]) * m->hp.n_embd;
        rc = sd_comm_init(bes, n, max_elems, &g->comm, err);
        if (rc) sd_error_prefix(err, rc, "%s: tensor split %d", m->path, n);
    }
    for (int32_t r = 1; r < n && !rc; r++) {
        rank_arg *a = malloc(sizeof *a);
        if (a) {
            a->g = g;
            a->r = r;
        }
        if (!a || pthread_create(&g->th[r], NULL, rank_main, a) != 0) {
            free(a);
            rc = sd_errorf(err, SD_ERR_OOM, "tensor split: cannot start the thread of rank %d", r);
            break;
        }
        g->n_threads++;
    }
    if (rc) {
        tp_free(g);
        return rc;
    }
    sd_session_set_group(g->sess[0], g, &group_ops);
    *out = g->sess[0];
    return SD_OK;
}
