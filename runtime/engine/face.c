/*
 * runtime/engine/face.c: the public face (include/specdec.h) over the engine. A thin
 * layer: sd_context is an sd_engine, sd_complete is sd_engine_generate with streaming
 * detokenization, sd_queue is an sd_batcher; the parameters map onto sd_gen_params with
 * `specdec generate`'s drafting defaults. No second engine lives here.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "include/specdec.h"
#include "runtime/engine/sd_engine.h"

struct sd_context {
    sd_engine *e;
};

sd_context_params sd_context_default_params(void) {
    const sd_engine_params ep = sd_engine_default_params();
    sd_context_params p;
    memset(&p, 0, sizeof p);
    p.n_ctx = ep.n_ctx;
    p.n_threads = ep.n_threads;
    return p;
}

int sd_context_init(const sd_context_params *p, sd_context **out, sd_error *err) {
    if (!out) return sd_errorf(err, SD_ERR_ARG, "sd_context_init: out is NULL");
    *out = NULL;
    if (!p) return sd_errorf(err, SD_ERR_ARG, "sd_context_init: params are NULL");
    if (!p->target) return sd_errorf(err, SD_ERR_ARG, "sd_context_init: no target (params.target)");
    sd_engine_params ep = sd_engine_default_params();
    ep.target = p->target;
    ep.draft = p->draft;
    ep.n_ctx = p->n_ctx;
    ep.n_threads = p->n_threads;
    ep.device = ep.device_draft = p->gpu ? SD_DEVICE_CUDA : SD_DEVICE_CPU;
    ep.log = p->log;
    ep.log_user = p->log_user;
    sd_context *ctx = calloc(1, sizeof *ctx);
    if (!ctx) return sd_errorf(err, SD_ERR_OOM, "sd_context_init: out of memory");
    const int rc = sd_engine_init(&ep, &ctx->e, err);
    if (rc) {
        free(ctx);
        return rc;
    }
    *out = ctx;
    return SD_OK;
}

void sd_context_free(sd_context *ctx) {
    if (!ctx) return;
    sd_engine_free(ctx->e);
    free(ctx);
}

int32_t sd_context_n_ctx(const sd_context *ctx) {
    return sd_engine_n_ctx(ctx->e);
}
int sd_context_has_draft(const sd_context *ctx) {
    return sd_engine_draft(ctx->e) != NULL;
}

int32_t sd_n_vocab(const sd_context *ctx) {
    return sd_vocab_n_tokens(sd_engine_vocab(ctx->e));
}
int32_t sd_token_bos(const sd_context *ctx) {
    return sd_vocab_bos(sd_engine_vocab(ctx->e));
}
int32_t sd_token_eos(const sd_context *ctx) {
    return sd_vocab_eos(sd_engine_vocab(ctx->e));
}

int sd_tokenize(const sd_context *ctx, const char *text, size_t len, int add_bos, int32_t *ids,
                int32_t cap, int32_t *n, sd_error *err) {
    if (!ctx || !text || !n || (cap > 0 && !ids) || cap < 0)
        return sd_errorf(err, SD_ERR_ARG, "sd_tokenize: NULL argument or cap %d < 0", (int)cap);
    int32_t *all = NULL;
    size_t n_all = 0;
    const unsigned flags = add_bos ? SD_VOCAB_ADD_SPECIAL : 0u;
    int rc = sd_vocab_tokenize(sd_engine_vocab(ctx->e), text, len, flags, &all, &n_all, err);
    if (rc) return rc;
    if (n_all > (size_t)INT32_MAX) {
        free(all);
        return sd_errorf(err, SD_ERR_ARG, "sd_tokenize: %zu ids, more than an int32 counts", n_all);
    }
    *n = (int32_t)n_all;
    if (*n > cap) {
        free(all);
        return sd_errorf(err, SD_ERR_ARG, "sd_tokenize: the text has %d ids, ids holds %d", (int)*n,
                         (int)cap);
    }
    if (n_all) memcpy(ids, all, n_all * sizeof *ids);
    free(all);
    return SD_OK;
}

int sd_token_to_piece(const sd_context *ctx, int32_t id, char *buf, size_t cap) {
    return sd_vocab_token_to_piece(sd_engine_vocab(ctx->e), id, 0u, buf, cap);
}

/* ---- one completion ---- */

sd_completion_params sd_completion_default_params(void) {
    const sd_gen_params g = sd_gen_default_params();
    sd_completion_params p;
    memset(&p, 0, sizeof p);
    p.n_predict = g.n_predict;
    p.n_draft = g.n_draft;
    p.draft_type = NULL;
    /* generate's drafting defaults (tools/cmd_generate.c): the adaptive policy and
     * llama.cpp's --draft-p-min. */
    p.adaptive = 1;
    p.draft_p_min = 0.75f;
    p.temp = g.samp.temp;
    p.top_k = g.samp.top_k;
    p.top_p = g.samp.top_p;
    p.min_p = g.samp.min_p;
    p.repeat_penalty = g.samp.repeat_penalty;
    p.repeat_last_n = g.samp.repeat_last_n;
    p.seed = g.seed;
    p.ignore_eos = g.ignore_eos;
    return p;
}

/* p -> the engine's generation parameters. Errors: SD_ERR_ARG (an unknown draft type, a
 * count or sampling value out of range, naming it). */
static int gen_of(const sd_completion_params *p, sd_gen_params *g, sd_error *err) {
    *g = sd_gen_default_params();
    if (p->n_predict < 1)
        return sd_errorf(err, SD_ERR_ARG, "completion: n_predict = %d, expected >= 1",
                         (int)p->n_predict);
    if (p->n_draft < 0 || p->n_draft > SD_MAX_DRAFT)
        return sd_errorf(err, SD_ERR_ARG, "completion: n_draft = %d, expected 0 .. %d",
                         (int)p->n_draft, SD_MAX_DRAFT);
    if (p->n_stop < 0 || p->n_stop > SD_MAX_STOP_STRINGS || (p->n_stop > 0 && !p->stop))
        return sd_errorf(err, SD_ERR_ARG, "completion: n_stop = %d, expected 0 .. %d strings",
                         (int)p->n_stop, SD_MAX_STOP_STRINGS);
    g->draft_type = SD_DRAFT_AUTO;
    if (p->draft_type && sd_draft_type_parse(p->draft_type, &g->draft_type) != 0)
        return sd_errorf(err, SD_ERR_ARG, "completion: draft_type '%s', expected one of %s",
                         p->draft_type, SD_DRAFT_TYPE_NAMES);
    if (!(p->draft_p_min >= 0.0f && p->draft_p_min <= 1.0f))
        return sd_errorf(err, SD_ERR_ARG, "completion: draft_p_min = %g, expected 0 .. 1",
                         (double)p->draft_p_min);
    g->n_predict = p->n_predict;
    g->n_draft = p->n_draft;
    g->k_policy = p->adaptive ? SD_K_ADAPTIVE : SD_K_FIXED;
    g->draft_p_min = p->draft_p_min;
    g->draft_min = 1;
    g->samp.temp = p->temp;
    g->samp.top_k = p->top_k;
    g->samp.top_p = p->top_p;
    g->samp.min_p = p->min_p;
    g->samp.repeat_penalty = p->repeat_penalty;
    g->samp.repeat_last_n = p->repeat_last_n;
    g->seed = p->seed;
    g->ignore_eos = p->ignore_eos != 0;
    g->grammar = p->grammar;
    return sd_sampling_check(&g->samp, err);
}

/* The prompt's ids: raw text with BOS, or one user message (after the system one) in the
 * model's chat template. *ids malloc'd. */
static int prompt_ids(const sd_context *ctx, const char *prompt, const sd_completion_params *p,
                      int32_t **ids, int32_t *n, sd_error *err) {
    sd_prompt_spec ps;
    memset(&ps, 0, sizeof ps);
    sd_chat_msg msgs[2];
    if (p->chat) {
        size_t k = 0;
        if (p->system) msgs[k++] = (sd_chat_msg){"system", p->system};
        msgs[k++] = (sd_chat_msg){"user", prompt};
        ps.messages = msgs;
        ps.n_messages = k;
    } else {
        ps.text = prompt;
        ps.len = strlen(prompt);
    }
    return sd_prompt_tokenize(sd_engine_vocab(ctx->e), &ps, ids, n, err);
}

/* sd_complete's caller's callback, under the text's (sd_stop_text: the pieces' text, cut
 * at a stop string). */
typedef struct piece_state {
    sd_piece_cb cb;
    void *user;
} piece_state;

static int on_text(void *user, const int32_t *tokens, int32_t n, const char *text, size_t len) {
    const piece_state *s = user;
    if (!s->cb) return 0;
    const sd_piece piece = {tokens, n, text, len};
    return s->cb(s->user, &piece);
}

int sd_complete_tokens(sd_context *ctx, const int32_t *prompt, int32_t n_prompt,
                       const sd_completion_params *p, sd_piece_cb cb, void *user,
                       sd_gen_stats *stats, sd_error *err) {
    if (!ctx || !prompt || n_prompt < 1)
        return sd_errorf(err, SD_ERR_ARG, "sd_complete: NULL context or prompt, or n_prompt %d < 1",
                         (int)n_prompt);
    const sd_completion_params def = sd_completion_default_params();
    if (!p) p = &def;
    sd_gen_params g;
    int rc = gen_of(p, &g, err);
    if (rc) return rc;
    sd_gen_stats local;
    if (!stats) stats = &local;
    int32_t *out = malloc((size_t)g.n_predict * sizeof *out);
    if (!out) return sd_errorf(err, SD_ERR_OOM, "sd_complete: out of memory");
    piece_state s = {cb, user};
    sd_stop_text *txt = NULL;
    rc = sd_stop_text_init(sd_engine_vocab(ctx->e), p->stop, p->n_stop, SD_DETOK_REPLACE_INVALID,
                           on_text, &s, &txt, err);
    if (rc) rc = sd_error_prefix(err, rc, "sd_complete");
    if (!rc)
        rc = sd_engine_generate_text(ctx->e, &g, txt, prompt, n_prompt, out, g.n_predict, stats,
                                     err);
    /* The bytes held back (a character cut at the end, the start of a stop string),
     * unless the caller asked to stop or something failed. */
    if (!rc && stats->stop != SD_STOP_NONE) sd_stop_text_finish(txt, stats);
    sd_stop_text_free(txt);
    free(out);
    return rc;
}

int sd_complete(sd_context *ctx, const char *prompt, const sd_completion_params *p, sd_piece_cb cb,
                void *user, sd_gen_stats *stats, sd_error *err) {
    if (!ctx || !prompt) return sd_errorf(err, SD_ERR_ARG, "sd_complete: NULL context or prompt");
    const sd_completion_params def = sd_completion_default_params();
    if (!p) p = &def;
    int32_t *ids = NULL, n = 0;
    int rc = prompt_ids(ctx, prompt, p, &ids, &n, err);
    if (!rc) rc = sd_complete_tokens(ctx, ids, n, p, cb, user, stats, err);
    free(ids);
    return rc;
}

/* ---- the queue: a batcher ---- */

/* One submitted request's callback, until its done event. */
typedef struct q_req {
    struct sd_queue *q;
    sd_event_cb cb;
    void *user;
    struct q_req *prev, *next;
} q_req;

struct sd_queue {
    sd_context *ctx;
    sd_batcher *b;
    int32_t k_max;
    pthread_mutex_t mu; /* guards reqs (submit on any thread, events on the stepping one) */
    q_req *reqs;
};

sd_queue_params sd_queue_default_params(void) {
    const sd_batcher_params bp = sd_batcher_default_params();
    sd_queue_params p;
    memset(&p, 0, sizeof p);
    p.n_parallel = bp.n_parallel;
    p.n_ctx = bp.n_ctx;
    p.k_max = bp.k_max;
    p.max_queue = bp.max_queue;
    p.prefix_cache = bp.prefix_cache;
    return p;
}

int sd_queue_init(sd_context *ctx, const sd_queue_params *p, sd_queue **out, sd_error *err) {
    if (!out) return sd_errorf(err, SD_ERR_ARG, "sd_queue_init: out is NULL");
    *out = NULL;
    if (!ctx || !p) return sd_errorf(err, SD_ERR_ARG, "sd_queue_init: NULL context or params");
    sd_batcher_params bp = sd_batcher_default_params();
    bp.n_parallel = p->n_parallel;
    bp.n_ctx = p->n_ctx;
    bp.k_max = p->k_max;
    bp.max_queue = p->max_queue;
    bp.prefix_cache = p->prefix_cache != 0;
    sd_queue *q = calloc(1, sizeof *q);
    if (!q) return sd_errorf(err, SD_ERR_OOM, "sd_queue_init: out of memory");
    if (pthread_mutex_init(&q->mu, NULL) != 0) {
        free(q);
        return sd_errorf(err, SD_ERR_OOM, "sd_queue_init: no mutex");
    }
    const int rc = sd_batcher_init(ctx->e, &bp, &q->b, err);
    if (rc) {
        pthread_mutex_destroy(&q->mu);
        free(q);
        return rc;
    }
    q->ctx = ctx;
    q->k_max = p->k_max;
    *out = q;
    return SD_OK;
}

static void unlink_req(sd_queue *q, q_req *r) {
    pthread_mutex_lock(&q->mu);
    if (r->prev)
        r->prev->next = r->next;
    else
        q->reqs = r->next;
    if (r->next) r->next->prev = r->prev;
    pthread_mutex_unlock(&q->mu);
    free(r);
}

void sd_queue_free(sd_queue *q) {
    if (!q) return;
    sd_batcher_free(q->b); /* requests still there end without a callback */
    for (q_req *r = q->reqs, *next; r; r = next) {
        next = r->next;
        free(r);
    }
    pthread_mutex_destroy(&q->mu);
    free(q);
}

static int on_event(void *user, const sd_req_event *ev) {
    q_req *r = user;
    sd_event e;
    memset(&e, 0, sizeof e);
    e.id = ev->id;
    e.tokens = ev->tokens;
    e.n_tokens = ev->n_tokens;
    e.text = ev->text;
    e.len = ev->len;
    e.done = ev->done;
    e.stop = ev->stop;
    e.stats = ev->stats;
    const int ret = r->cb ? r->cb(r->user, &e) : 0;
    if (ev->done) unlink_req(r->q, r); /* its last event */
    return ret;
}

int sd_queue_submit_tokens(sd_queue *q, const int32_t *prompt, int32_t n_prompt,
                           const sd_completion_params *p, sd_event_cb cb, void *user, int64_t *id,
                           sd_error *err) {
    if (!q || !prompt || n_prompt < 1)
        return sd_errorf(err, SD_ERR_ARG,
                         "sd_queue_submit: NULL queue or prompt, or n_prompt %d < 1",
                         (int)n_prompt);
    const sd_completion_params def = sd_completion_default_params();
    if (!p) p = &def;
    sd_request rq;
    memset(&rq, 0, sizeof rq);
    int rc = gen_of(p, &rq.gen, err);
    if (rc) return rc;
    if (p->n_draft > q->k_max)
        return sd_errorf(err, SD_ERR_ARG, "sd_queue_submit: n_draft = %d, the queue's k_max is %d",
                         (int)p->n_draft, (int)q->k_max);
    if (!sd_context_has_draft(q->ctx) && rq.gen.draft_type == SD_DRAFT_AUTO) rq.gen.n_draft = 0;
    q_req *r = calloc(1, sizeof *r);
    if (!r) return sd_errorf(err, SD_ERR_OOM, "sd_queue_submit: out of memory");
    r->q = q;
    r->cb = cb;
    r->user = user;
    pthread_mutex_lock(&q->mu);
    r->next = q->reqs;
    if (q->reqs) q->reqs->prev = r;
    q->reqs = r;
    pthread_mutex_unlock(&q->mu);
    rq.prompt = prompt;
    rq.n_prompt = n_prompt;
    rq.stop = p->stop;
    rq.n_stop = p->n_stop;
    rq.n_choices = 1;
    rq.cb = on_event;
    rq.user = r;
    rc = sd_batcher_submit(q->b, &rq, id, err);
    if (rc) unlink_req(q, r); /* never queued: no event will come */
    return rc;
}

int sd_queue_submit(sd_queue *q, const char *prompt, const sd_completion_params *p, sd_event_cb cb,
                    void *user, int64_t *id, sd_error *err) {
    if (!q || !prompt) return sd_errorf(err, SD_ERR_ARG, "sd_queue_submit: NULL queue or prompt");
    const sd_completion_params def = sd_completion_default_params();
    if (!p) p = &def;
    int32_t *ids = NULL, n = 0;
    int rc = prompt_ids(q->ctx, prompt, p, &ids, &n, err);
    if (!rc) rc = sd_queue_submit_tokens(q, ids, n, p, cb, user, id, err);
    free(ids);
    return rc;
}

int sd_queue_cancel(sd_queue *q, int64_t id) {
    return q ? sd_batcher_cancel(q->b, id) : -1;
}

int sd_queue_step(sd_queue *q, sd_error *err) {
    if (!q) return sd_errorf(err, SD_ERR_ARG, "sd_queue_step: the queue is NULL");
    return sd_batcher_step(q->b, err);
}

int sd_queue_busy(sd_queue *q) {
    return q ? sd_batcher_busy(q->b) : 0;
}
