/* runtime/engine/gen_batch.c: sd_engine_generate on the batcher's step (see gen_batch.h):
 * a batcher of one slot, the request submitted, stepped to its end, its events copied
 * into the caller's output, logprobs and statistics; and the chat's context shift of the
 * cached conversation between runs (sd_gen_batch_shift). */
#include <stdlib.h>
#include <string.h>

#include "runtime/engine/gen_batch.h"
#include "runtime/engine/batcher_impl.h"

/* One call's output, filled by the request's events. */
typedef struct gb_out {
    int32_t *out;
    int32_t cap_out, n_out;
    sd_token_logprob *lp; /* gp->logprobs_out, or NULL */
    sd_token_cb cb;
    void *user;
    int stopped; /* the callback asked to stop */
    int done;
    sd_gen_stats st;
} gb_out;

static int on_event(void *user, const sd_req_event *ev) {
    gb_out *g = user;
    for (int32_t i = 0; i < ev->n_tokens && g->n_out < g->cap_out; i++) {
        if (g->lp && ev->logprobs) g->lp[g->n_out] = ev->logprobs[i];
        g->out[g->n_out++] = ev->tokens[i];
    }
    int rc = 0;
    if (ev->n_tokens > 0 && g->cb && !g->stopped) rc = g->cb(g->user, ev->tokens, ev->n_tokens);
    if (rc) g->stopped = 1;
    if (ev->done) {
        g->done = 1;
        g->st = *ev->stats;
    }
    return rc;
}

static int make_batcher(sd_engine *e, const sd_ngram_cache *lookup, sd_batcher **out,
                        sd_error *err) {
    const int32_t n_ctx = sd_engine_n_ctx(e);
    sd_batcher_params bp = sd_batcher_default_params();
    bp.n_parallel = 1;
    bp.n_ctx = n_ctx;
    bp.kv_block = SD_GEN_BATCH_BLOCK;
    /* the context, a draft in flight and a copy-on-write block (the admission's quota) */
    bp.n_kv_blocks = (n_ctx + SD_GEN_BATCH_BLOCK - 1) / SD_GEN_BATCH_BLOCK + 2;
    bp.k_max = SD_MAX_DRAFT;
    bp.max_queue = 1;
    bp.prefix_cache = 1;
    bp.draft_chunk = bp.n_batch; /* the draft follows the prompt as fast as the target */
    bp.lookup_cache = lookup;
    return sd_batcher_init(e, &bp, out, err);
}

int sd_gen_batch_run(sd_engine *e, sd_batcher **b, const sd_ngram_cache *lookup,
                     const sd_gen_params *gp, const int32_t *prompt, int32_t n_prompt,
                     sd_token_cb cb, void *user, int32_t *out, int32_t cap_out, sd_gen_stats *st,
                     sd_error *err) {
    memset(st, 0, sizeof *st);
    st->n_prompt = n_prompt;
    /* generate's argument checks; the batcher checks the rest */
    if (n_prompt < 1 || !prompt) return sd_errorf(err, SD_ERR_ARG, "generate: empty prompt");
    if (gp->n_predict < 1 || cap_out < gp->n_predict)
        return sd_errorf(err, SD_ERR_ARG, "generate: n_predict %d must be >= 1 and <= %d",
                         gp->n_predict, cap_out);
    if (gp->logprobs &&
        (!gp->logprobs_out || gp->top_logprobs < 0 || gp->top_logprobs > SD_MAX_TOP_LOGPROBS))
        return sd_errorf(err, SD_ERR_ARG,
                         "generate: logprobs need logprobs_out and top_logprobs %d in 0 .. %d",
                         gp->top_logprobs, SD_MAX_TOP_LOGPROBS);
    int rc = *b ? SD_OK : make_batcher(e, lookup, b, err);
    if (rc) return sd_error_prefix(err, rc, "generate");
    gb_out g;
    memset(&g, 0, sizeof g);
    g.out = out;
    g.cap_out = cap_out;
    g.lp = gp->logprobs ? gp->logprobs_out : NULL;
    g.cb = cb;
    g.user = user;
    sd_request r;
    memset(&r, 0, sizeof r);
    r.prompt = prompt;
    r.n_prompt = n_prompt;
    r.gen = *gp;
    r.n_choices = 1;
    r.stop_at_context = 1; /* a full context is a stop (SD_STOP_CONTEXT), not an error */
    r.cb = on_event;
    r.user = &g;
    if ((rc = sd_batcher_submit(*b, &r, NULL, err))) return rc;
    while (!rc && sd_batcher_busy(*b))
        rc = sd_batcher_step(*b, err); /* an error ends the request (done, stop NONE) */
    if (rc) return rc;
    SD_CHECK(g.done, "the request of a finished batcher is done");
    *st = g.st;
    if (st->stop == SD_STOP_CANCEL) st->stop = SD_STOP_NONE; /* the callback's stop */
    /* A request ends without a reason of its own only when its text found no memory. */
    if (st->stop == SD_STOP_NONE && !g.stopped)
        return sd_errorf(err, SD_ERR_OOM, "generate: out of memory for the text");
    return SD_OK;
}

int sd_gen_batch_shift(sd_batcher *b, const int32_t *conv, int32_t n_conv, int32_t n_keep,
                       int32_t n_discard, int32_t *n_shifted, sd_error *err) {
    *n_shifted = 0;
    if (n_keep < 0 || n_discard < 1 || n_conv < 0 || n_keep > n_conv - n_discard)
        return sd_errorf(err, SD_ERR_ARG, "context shift: keep %d, discard %d of %d tokens", n_keep,
                         n_discard, n_conv);
    if (!b->p.prefix_cache || sd_batcher_busy(b) || b->slots[0]) return SD_OK;
    const int32_t got = sd_session_seq_attach_prefix(b->ts, 0, conv, n_conv);
    int rc = SD_OK;
    if (got > n_keep + n_discard) {
        rc = sd_session_seq_shift(b->ts, 0, n_keep, n_discard, err);
        if (rc == SD_OK) {
            sd_session_seq_store_prefix(b->ts, 0);
            *n_shifted = got - n_discard;
        } else if (rc == SD_ERR_UNSUPPORTED || rc == SD_ERR_OOM) {
            sd_error_clear(err); /* the next run evaluates the shortened conversation */
            rc = SD_OK;
        }
    }
    sd_session_seq_truncate(b->ts, 0, 0, NULL); /* cannot fail */
    return rc;
}
