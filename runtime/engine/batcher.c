/* runtime/engine/batcher.c: the batcher's face: sessions, the request queue, cancel,
 * statistics (see sd_engine.h; a step is batch_step.c). */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime/engine/batcher_impl.h"

sd_batcher_params sd_batcher_default_params(void) {
    sd_batcher_params p;
    memset(&p, 0, sizeof p);
    p.n_parallel = 4;
    p.n_ctx = 0;
    p.n_kv_blocks = 0;
    p.kv_block = 16;
    p.n_batch = 512;
    p.k_max = 8;
    p.max_queue = 64;
    p.prefix_cache = 1;
    p.draft_chunk = 64;
    return p;
}

static void *xcalloc(size_t n, size_t size, int *ok) {
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p) *ok = 0;
    return p;
}

void sd_batcher_free(sd_batcher *b) {
    if (!b) return;
    for (int32_t i = 0; i < b->n_running; i++)
        sd_req_free(b->running[i]);
    for (sd_req *r = b->q_head; r;) {
        sd_req *n = r->next;
        sd_req_free(r);
        r = n;
    }
    if (b->ngram)
        for (int32_t i = 0; i < b->p.n_parallel; i++)
            sd_proposer_free(b->ngram[i]);
    if (b->suffix)
        for (int32_t i = 0; i < b->p.n_parallel; i++)
            sd_proposer_free(b->suffix[i]);
    if (b->q)
        for (int32_t i = 0; i < b->p.n_parallel; i++)
            free(b->q[i]);
    free(b->ngram);
    free(b->suffix);
    sd_suffix_cache_free(b->suffix_cache);
    free(b->q);
    sd_session_free(b->ts);
    sd_session_free(b->ds);
    free(b->slots);
    free(b->running);
    free(b->btok);
    free(b->bpar);
    free(b->bseq);
    free(b->bwant);
    free(b->logits);
    free(b->probs);
    free(b->raw);
    free(b->residual);
    free(b->iscratch);
    for (int32_t i = 0; i <= SD_MAX_DRAFT; i++)
        sd_grammar_state_free(b->gchain[i]);
    free(b->gbits);
    free(b->dbtok);
    free(b->dbseq);
    free(b->dbwant);
    free(b->dlogits);
    free(b->dhead);
    free(b->dcol_of);
    free(b->dqrow);
    pthread_cond_destroy(&b->cv);
    pthread_mutex_destroy(&b->mu);
    free(b);
}

/* The trimmed head of ep->draft_head (its first draft_head_n ids) on the draft session,
 * as sd_proposer_llm_set_head for generate's proposer. */
static int set_draft_head(sd_batcher *b, const sd_engine_params *ep, sd_error *err) {
    int32_t *ids = NULL, n = 0;
    int rc = sd_draft_head_load(ep->draft_head, b->vocab, ep->draft_head_n, &ids, &n, err);
    if (rc) return rc;
    for (int32_t j = 0; j < n && !rc; j++)
        if (ids[j] < 0 || ids[j] >= b->n_common)
            rc = sd_errorf(err, SD_ERR_ARG,
                           "%s: draft head id %d at index %d: expected an id both models have, "
                           "in [0, %d)",
                           ep->draft_head, ids[j], j, b->n_common);
    if (!rc) rc = sd_session_set_output_rows(b->ds, ids, n, err); /* checks repeats */
    if (!rc && n > 0) {
        b->dcol_of = malloc((size_t)b->n_vocab_d * sizeof *b->dcol_of);
        if (!b->dcol_of) rc = sd_errorf(err, SD_ERR_OOM, "batcher: draft head: out of memory");
    }
    if (rc || n == 0) {
        free(ids);
        return rc;
    }
    for (int32_t v = 0; v < b->n_vocab_d; v++)
        b->dcol_of[v] = -1;
    for (int32_t j = 0; j < n; j++)
        b->dcol_of[ids[j]] = j;
    b->dhead = ids;
    b->n_dhead = n;
    return SD_OK;
}

static int check_params(const sd_batcher_params *p, sd_error *err) {
    if (p->n_parallel < 1 || p->n_parallel > SD_MAX_SEQ)
        return sd_errorf(err, SD_ERR_ARG, "batcher: n_parallel %d, expected 1 .. %d", p->n_parallel,
                         SD_MAX_SEQ);
    if (p->n_ctx < 0) return sd_errorf(err, SD_ERR_ARG, "batcher: n_ctx %d is negative", p->n_ctx);
    if (p->n_kv_blocks < 0)
        return sd_errorf(err, SD_ERR_ARG, "batcher: n_kv_blocks %d is negative", p->n_kv_blocks);
    if (p->kv_block < 1 || p->kv_block > SD_KV_MAX_BLOCK)
        return sd_errorf(err, SD_ERR_ARG, "batcher: kv_block %d, expected 1 .. %d", p->kv_block,
                         SD_KV_MAX_BLOCK);
    if (p->n_batch < 1 || p->n_batch > 65536)
        return sd_errorf(err, SD_ERR_ARG, "batcher: n_batch %d, expected 1 .. 65536", p->n_batch);
    if (p->k_max < 1 || p->k_max > SD_MAX_DRAFT)
        return sd_errorf(err, SD_ERR_ARG, "batcher: k_max %d, expected 1 .. %d", p->k_max,
                         SD_MAX_DRAFT);
    if (p->max_queue < 0)
        return sd_errorf(err, SD_ERR_ARG, "batcher: max_queue %d is negative", p->max_queue);
    if (p->draft_chunk < 1 || p->draft_chunk > 4096)
        return sd_errorf(err, SD_ERR_ARG, "batcher: draft_chunk %d, expected 1 .. 4096",
                         p->draft_chunk);
    return SD_OK;
}

int sd_batcher_init(sd_engine *e, const sd_batcher_params *p, sd_batcher **out, sd_error *err) {
    *out = NULL;
    if (!e || !p) return sd_errorf(err, SD_ERR_ARG, "batcher: engine or params is NULL");
    int rc = check_params(p, err);
    if (rc) return rc;
    const sd_engine_params *ep = sd_engine_params_of(e);
    sd_batcher *b = calloc(1, sizeof *b);
    if (!b) return sd_errorf(err, SD_ERR_OOM, "batcher: out of memory");
    pthread_mutex_init(&b->mu, NULL);
    pthread_cond_init(&b->cv, NULL);
    b->e = e;
    b->p = *p;
    b->tm = sd_engine_target(e);
    b->dm = sd_engine_draft(e);
    b->vocab = sd_engine_vocab(e);
    b->n_vocab = sd_model_hparams(b->tm)->n_vocab;
    b->eos = sd_vocab_eos(b->vocab);
    b->ngram = NULL;
    b->ngram_params = ep->ngram;
    b->next_id = 1;
    b->n_ctx = p->n_ctx > 0 && p->n_ctx < sd_engine_n_ctx(e) ? p->n_ctx : sd_engine_n_ctx(e);
    const int32_t np = p->n_parallel;
    b->n_out = np * (p->k_max + 1);
    sd_session_params sp = sd_session_default_params();
    sp.n_ctx = b->n_ctx;
    sp.n_batch = p->n_batch > b->n_out ? p->n_batch : b->n_out;
    sp.n_outputs = b->n_out;
    sp.n_threads = ep->n_threads;
    sp.kv_type = ep->kv_type;
    sp.n_seq = np;
    sp.device = ep->device; /* a device's sessions refuse by name what it cannot run */
    sp.kv_block = p->kv_block;
    sp.n_kv_blocks = p->n_kv_blocks;
    sp.n_split = ep->n_split; /* a tensor-parallel target: every rank pages its shard alike */
    rc = sd_session_init(b->tm, &sp, &b->ts, err);
    if (rc) {
        sd_error_prefix(err, rc, "batcher: target");
        goto fail;
    }
    b->p.n_batch = sd_session_n_batch(b->ts);
    if (b->dm) {
        b->n_vocab_d = sd_model_hparams(b->dm)->n_vocab;
        b->n_common = b->n_vocab_d < b->n_vocab ? b->n_vocab_d : b->n_vocab;
        b->n_ctx_d = sd_engine_n_ctx_draft(e) < b->n_ctx ? sd_engine_n_ctx_draft(e) : b->n_ctx;
        b->n_batch_d = np * (p->draft_chunk + 1);
        sd_session_params dp = sp;
        dp.n_ctx = b->n_ctx_d;
        dp.n_batch = b->n_batch_d;
        dp.n_outputs = np;
        dp.device = ep->device_draft;
        dp.n_split = 0;           /* the draft is never split */
        dp.share_threads = b->ts; /* draft and target passes take turns: one pool */
        rc = sd_session_init(b->dm, &dp, &b->ds, err);
        if (rc) {
            sd_error_prefix(err, rc, "batcher: draft");
            goto fail;
        }
        b->n_batch_d = sd_session_n_batch(b->ds);
        if (ep->draft_head && (rc = set_draft_head(b, ep, err))) goto fail;
        b->n_dlog = sd_session_n_logits(b->ds);
    }
    int ok = 1;
    const size_t nv = (size_t)b->n_vocab;
    const size_t nmax = b->n_vocab_d > b->n_vocab ? (size_t)b->n_vocab_d : nv;
    const size_t nb = (size_t)b->p.n_batch;
    b->slots = xcalloc((size_t)np, sizeof *b->slots, &ok);
    b->running = xcalloc((size_t)np, sizeof *b->running, &ok);
    b->btok = xcalloc(nb, sizeof *b->btok, &ok);
    b->bpar = xcalloc(nb, sizeof *b->bpar, &ok);
    b->bseq = xcalloc(nb, sizeof *b->bseq, &ok);
    b->bwant = xcalloc(nb, sizeof *b->bwant, &ok);
    b->logits = xcalloc((size_t)b->n_out * nv, sizeof(float), &ok);
    b->probs = xcalloc((size_t)(p->k_max + 1) * nv, sizeof(float), &ok);
    b->residual = xcalloc(nv, sizeof(float), &ok);
    b->iscratch = xcalloc(nmax, sizeof(int32_t), &ok);
    b->ngram = xcalloc((size_t)np, sizeof *b->ngram, &ok);
    b->suffix = xcalloc((size_t)np, sizeof *b->suffix, &ok);
    if (b->ds) {
        const size_t nbd = (size_t)b->n_batch_d;
        b->dbtok = xcalloc(nbd, sizeof *b->dbtok, &ok);
        b->dbseq = xcalloc(nbd, sizeof *b->dbseq, &ok);
        b->dbwant = xcalloc(nbd, sizeof *b->dbwant, &ok);
        b->dlogits = xcalloc((size_t)np * (size_t)b->n_vocab_d, sizeof(float), &ok);
        b->dqrow = xcalloc((size_t)b->n_common, sizeof(float), &ok);
        b->q = xcalloc((size_t)np, sizeof *b->q, &ok);
        for (int32_t i = 0; ok && i < np; i++)
            b->q[i] = xcalloc((size_t)p->k_max * nv, sizeof(float), &ok);
    }
    if (!ok) {
        rc = sd_errorf(err, SD_ERR_OOM, "batcher: out of memory (pass buffers)");
        goto fail;
    }
    /* One n-gram proposer per slot (reset per request; it indexes a sequence's tokens). */
    sd_ngram_params ngp = b->ngram_params;
    ngp.n_ctx = b->n_ctx + 1;
    for (int32_t i = 0; i < np; i++) {
        if ((rc = sd_proposer_ngram_init(&ngp, b->n_vocab, &b->ngram[i], err))) goto fail;
        if (p->lookup_cache &&
            (rc = sd_proposer_ngram_set_cache(b->ngram[i], p->lookup_cache, err)))
            goto fail;
    }
    /* And a suffix proposer per slot (it rebuilds for a new request's tokens). */
    sd_suffix_params sxp = ep->suffix;
    sxp.n_ctx = b->n_ctx + 1;
    const sd_grammar_vocab *tb = NULL; /* their byte-level matching */
    if ((rc = sd_engine_grammar_vocab(b->e, &tb, err))) goto fail;
    for (int32_t i = 0; i < np; i++)
        if ((rc = sd_proposer_suffix_init(&sxp, b->n_vocab, &b->suffix[i], err)) ||
            (rc = sd_proposer_suffix_set_bytes(b->suffix[i], tb, err)))
            goto fail;
    if (p->suffix_cache_bytes > 0) {
        if ((rc = sd_suffix_cache_init(b->n_vocab, p->suffix_cache_bytes, &b->suffix_cache, err)))
            goto fail;
        for (int32_t i = 0; i < np; i++)
            sd_proposer_suffix_set_cache(b->suffix[i], b->suffix_cache, NULL);
    }
    sd_session_kv_stats(b->ts, &b->st.kv);
    b->st.kv_bytes_per_token = sd_session_kv_bytes_per_token(b->ts);
    if (b->ds) {
        sd_session_kv_stats(b->ds, &b->st.kv_draft);
        b->st.kv_bytes_per_token_draft = sd_session_kv_bytes_per_token(b->ds);
    }
    *out = b;
    return SD_OK;
fail:
    sd_batcher_free(b);
    return rc;
}

int32_t sd_batcher_n_ctx(const sd_batcher *b) {
    return b->n_ctx;
}

void sd_req_free(sd_req *r) {
    if (!r) return;
    for (int32_t i = 0; i < r->n_choices && r->ch; i++) {
        free(r->ch[i].ctx);
        free(r->ch[i].text);
        free(r->ch[i].lp);
        free(r->ch[i].dview);
        sd_detok_free(r->ch[i].detok);
        sd_grammar_state_free(r->ch[i].gseq);
        sd_grammar_state_free(r->ch[i].gdraft);
    }
    sd_grammar_free(r->grammar);
    free(r->bias);
    for (int32_t i = 0; i < r->n_stop; i++)
        free(r->stop[i]);
    free(r->ch);
    free(r->prompt);
    free(r);
}

/* The blocks a choice may need at worst: its whole context plus a draft in flight, plus
 * one for a copy-on-write of a shared last block. */
static int32_t quota(const sd_session *s, int32_t n_ctx_seq, int64_t positions) {
    if (positions > n_ctx_seq) positions = n_ctx_seq;
    return sd_session_kv_blocks_for(s, positions) + 1;
}

static int check_request(sd_batcher *b, const sd_request *r, sd_error *err) {
    if (!r->prompt || r->n_prompt < 1) return sd_errorf(err, SD_ERR_ARG, "request: empty prompt");
    for (int32_t i = 0; i < r->n_prompt; i++)
        if (r->prompt[i] < 0 || r->prompt[i] >= b->n_vocab)
            return sd_errorf(err, SD_ERR_ARG, "request: prompt token %d at %d is outside [0, %d)",
                             r->prompt[i], i, b->n_vocab);
    const sd_gen_params *g = &r->gen;
    if (g->n_predict < 1)
        return sd_errorf(err, SD_ERR_ARG, "request: max tokens %d, expected >= 1", g->n_predict);
    if (g->n_draft < 0 || g->n_draft > b->p.k_max)
        return sd_errorf(err, SD_ERR_ARG, "request: draft tokens %d, expected 0 .. %d (k_max)",
                         g->n_draft, b->p.k_max);
    if (g->chain_draft_max < 0 || g->chain_draft_max > SD_MAX_DRAFT || g->chain_long_match < 0 ||
        g->chain_long_match > SD_MAX_DRAFT)
        return sd_errorf(err, SD_ERR_ARG,
                         "request: chain limits %d (draft model) and %d (long match), expected "
                         "0 .. %d each",
                         g->chain_draft_max, g->chain_long_match, SD_MAX_DRAFT);
    int rc = sd_sampling_check(&g->samp, err);
    if (rc) return sd_error_prefix(err, rc, "request");
    for (int32_t i = 0; i < g->samp.n_logit_bias; i++)
        if (g->samp.logit_bias[i].id >= b->n_vocab)
            return sd_errorf(err, SD_ERR_ARG, "request: logit_bias token id %d outside [0, %d)",
                             g->samp.logit_bias[i].id, b->n_vocab);
    if (g->logprobs && (g->top_logprobs < 0 || g->top_logprobs > SD_MAX_TOP_LOGPROBS))
        return sd_errorf(err, SD_ERR_ARG, "request: top_logprobs %d, expected 0 .. %d",
                         g->top_logprobs, SD_MAX_TOP_LOGPROBS);
    if (g->n_stop_ids < 0 || g->n_stop_ids > SD_MAX_STOP_IDS)
        return sd_errorf(err, SD_ERR_ARG, "request: %d stop ids, expected 0 .. %d", g->n_stop_ids,
                         SD_MAX_STOP_IDS);
    if (r->n_stop < 0 || r->n_stop > SD_MAX_STOP_STRINGS || (r->n_stop > 0 && !r->stop))
        return sd_errorf(err, SD_ERR_ARG, "request: %d stop strings, expected 0 .. %d", r->n_stop,
                         SD_MAX_STOP_STRINGS);
    for (int32_t i = 0; i < r->n_stop; i++)
        if (!r->stop[i] || !r->stop[i][0])
            return sd_errorf(err, SD_ERR_ARG, "request: stop string %d is empty", i);
    if (r->n_choices < 1 || r->n_choices > SD_MAX_CHOICES || r->n_choices > b->p.n_parallel)
        return sd_errorf(err, SD_ERR_ARG, "request: %d choices, expected 1 .. %d", r->n_choices,
                         SD_MAX_CHOICES < b->p.n_parallel ? SD_MAX_CHOICES : b->p.n_parallel);
    /* Token trees (the n-gram and suffix proposers'; the chained and LLM types draft
     * chains): the limits of a tree, and at most k_max nodes (the rows of a pass). */
    if (g->tree_width < 0 || (int64_t)g->tree_width * g->n_draft > SD_MAX_DRAFT)
        return sd_errorf(err, SD_ERR_ARG, "request: draft tree %dx%d: width x depth must be <= %d",
                         g->tree_width, g->n_draft, SD_MAX_DRAFT);
    const int drafts = g->n_draft > 0 && g->draft_type != SD_DRAFT_NONE &&
                       !(g->draft_type == SD_DRAFT_AUTO && !b->ds);
    if (g->tree_width > 0 && drafts) {
        if (g->tree_width * g->n_draft > b->p.k_max)
            return sd_errorf(err, SD_ERR_ARG,
                             "request: draft tree %dx%d: more nodes than the batcher's k_max %d",
                             g->tree_width, g->n_draft, b->p.k_max);
        if (g->k_policy != SD_K_FIXED)
            return sd_errorf(err, SD_ERR_UNSUPPORTED,
                             "request: draft trees take a fixed K (--draft-tree with "
                             "--draft-policy %s)",
                             sd_k_policy_name(g->k_policy));
        if (g->logprobs)
            return sd_errorf(err, SD_ERR_UNSUPPORTED,
                             "request: draft trees with logprobs are not supported (use a chain: "
                             "no --draft-tree)");
        if (g->samp.temp > 0.0f && g->samp.spec != SD_SPEC_GUMBEL)
            return sd_errorf(err, SD_ERR_UNSUPPORTED,
                             "request: draft trees are verified under greedy or Gumbel "
                             "sampling only (--spec-sampling gumbel), not rejection sampling");
        if (g->grammar)
            return sd_errorf(err, SD_ERR_UNSUPPORTED,
                             "request: draft trees with a grammar are not supported (use a chain: "
                             "no --draft-tree)");
        if (g->synth_accept)
            return sd_errorf(err, SD_ERR_UNSUPPORTED,
                             "request: synthetic rejection verifies chains, not draft trees");
        const sd_device dev = sd_engine_params_of(b->e)->device;
        if (dev != SD_DEVICE_CPU) /* the tree attention is the CPU backend's */
            return sd_errorf(err, SD_ERR_UNSUPPORTED,
                             "request: token trees run on the cpu backend, not %s (use a chain: "
                             "no --draft-tree)",
                             sd_device_name(dev));
    }
    if (g->context_shift && r->n_choices != 1)
        return sd_errorf(err, SD_ERR_ARG, "request: a context shift runs one choice, not %d",
                         r->n_choices);
    const int llm = g->n_draft > 0 && sd_draft_type_uses_llm(g->draft_type);
    if (llm && !b->ds)
        return sd_errorf(err, SD_ERR_ARG, "request: draft type %s needs a draft model",
                         sd_draft_type_name(g->draft_type));
    int64_t need = (int64_t)r->n_prompt + g->n_predict;
    const int at_context = r->stop_at_context || g->context_shift;
    if (at_context && r->n_prompt > b->n_ctx)
        return sd_errorf(err, SD_ERR_CONTEXT,
                         "prompt of %d tokens does not fit the context of %d tokens", r->n_prompt,
                         b->n_ctx);
    if (at_context && need > b->n_ctx) need = b->n_ctx; /* it stops (or shifts) there */
    if (need > b->n_ctx)
        return sd_errorf(err, SD_ERR_CONTEXT,
                         "request: %d prompt tokens + %d max tokens exceed the context of %d "
                         "tokens per sequence",
                         r->n_prompt, g->n_predict, b->n_ctx);
    sd_kv_pool_stats kv;
    sd_session_kv_stats(b->ts, &kv);
    const int64_t blocks = (int64_t)r->n_choices * quota(b->ts, b->n_ctx, need + b->p.k_max + 1);
    if (blocks > kv.n_blocks)
        return sd_errorf(err, SD_ERR_CONTEXT,
                         "request: needs %lld KV blocks, the pool has %d (raise the KV pool or "
                         "lower max tokens)",
                         (long long)blocks, kv.n_blocks);
    return SD_OK;
}

/* A request record with its choices (ctx buffers, detokenizers), gp completed. */
static int req_new(sd_batcher *b, const sd_request *r, sd_req **out, sd_error *err) {
    *out = NULL;
    sd_req *q = calloc(1, sizeof *q);
    if (!q) return sd_errorf(err, SD_ERR_OOM, "request: out of memory");
    q->gp = r->gen;
    q->n_prompt = r->n_prompt;
    q->n_choices = r->n_choices;
    q->cb = r->cb;
    q->user = r->user;
    q->progress = r->progress != 0;
    q->stop_at_context = r->stop_at_context != 0 || r->gen.context_shift != 0;
    if (r->gen.context_shift)
        q->n_keep =
            sd_ctx_shift_keep(r->prompt, r->n_prompt, r->gen.shift_keep, sd_vocab_bos(b->vocab));
    q->t_submit = sd_time_ms();
    int ok = 1;
    q->prompt = xcalloc((size_t)r->n_prompt, sizeof *q->prompt, &ok);
    q->ch = xcalloc((size_t)r->n_choices, sizeof *q->ch, &ok);
    q->gp.logprobs_out = NULL; /* sd_engine_generate's; a request's go with its events */
    q->gp.samp.logit_bias = NULL;
    if (r->gen.samp.n_logit_bias > 0) { /* the request's own copy */
        q->bias = xcalloc((size_t)r->gen.samp.n_logit_bias, sizeof *q->bias, &ok);
        if (ok)
            memcpy(q->bias, r->gen.samp.logit_bias,
                   (size_t)r->gen.samp.n_logit_bias * sizeof *q->bias);
        q->gp.samp.logit_bias = q->bias;
    }
    for (int32_t i = 0; ok && i < r->n_stop; i++) {
        q->stop_len[i] = strlen(r->stop[i]);
        q->stop[i] = strdup(r->stop[i]);
        ok = q->stop[i] != NULL;
        q->n_stop = i + 1;
    }
    if (!ok) {
        sd_req_free(q);
        return sd_errorf(err, SD_ERR_OOM, "request: out of memory");
    }
    memcpy(q->prompt, r->prompt, (size_t)r->n_prompt * sizeof *q->prompt);
    /* Stop at every end-of-generation id of the vocabulary too, as sd_engine_generate. */
    int rc0 = sd_step_add_eog(&q->gp, b->vocab, err);
    if (rc0) {
        sd_req_free(q);
        return sd_error_prefix(err, rc0, "request");
    }
    if (q->gp.grammar) {            /* compiled once for the request; the text is not kept */
        pthread_mutex_lock(&b->mu); /* the engine builds its token bytes on first use */
        rc0 =
            q->gp.grammar_vocab ? SD_OK : sd_engine_grammar_vocab(b->e, &q->gp.grammar_vocab, err);
        if (!rc0 && !b->gbits) {
            b->gbits = calloc(((size_t)b->n_vocab + 63) / 64, sizeof *b->gbits);
            if (!b->gbits) rc0 = sd_errorf(err, SD_ERR_OOM, "request: out of memory");
        }
        pthread_mutex_unlock(&b->mu);
        if (!rc0) rc0 = sd_step_grammar_compile(&q->gp, b->n_vocab, &q->grammar, err);
        q->gp.grammar = NULL;
        q->gp.grammar_root = NULL;
        if (rc0) {
            sd_req_free(q);
            return sd_error_prefix(err, rc0, "request");
        }
    }
    if (q->gp.n_draft == 0) q->gp.draft_type = SD_DRAFT_NONE;
    if (q->gp.draft_type == SD_DRAFT_AUTO) q->gp.draft_type = b->ds ? SD_DRAFT_LLM : SD_DRAFT_NONE;
    if (q->gp.draft_type == SD_DRAFT_NONE) q->gp.n_draft = 0;
    /* its tokens: at most the context + 1 (the last is never fed back) with stop_at_context */
    int64_t cap64 = (int64_t)r->n_prompt + r->gen.n_predict + 1;
    if (q->stop_at_context && cap64 > (int64_t)b->n_ctx + 2) cap64 = (int64_t)b->n_ctx + 2;
    const int32_t cap = (int32_t)cap64;
    for (int32_t i = 0; i < r->n_choices; i++) {
        sd_choice *c = &q->ch[i];
        c->r = q;
        c->index = i;
        c->slot = -1;
        c->drow = -1;
        c->cap = cap;
        c->ctx = malloc((size_t)cap * sizeof *c->ctx);
        if (q->gp.logprobs) c->lp = malloc((size_t)r->gen.n_predict * sizeof *c->lp);
        int rc = c->ctx && (c->lp || !q->gp.logprobs)
                     ? sd_detok_init(b->vocab, SD_DETOK_REPLACE_INVALID, &c->detok, err)
                     : sd_errorf(err, SD_ERR_OOM, "request: out of memory");
        if (!rc && q->grammar) rc = sd_grammar_state_init(q->grammar, &c->gseq, err);
        if (!rc && q->grammar) rc = sd_grammar_state_clone(c->gseq, &c->gdraft, err);
        if (rc) {
            sd_req_free(q);
            return rc;
        }
        memcpy(c->ctx, r->prompt, (size_t)r->n_prompt * sizeof *c->ctx);
        c->n_ctx = r->n_prompt;
        c->n_emitted_sent = r->n_prompt;
        c->st.n_prompt = r->n_prompt;
        c->adaptive = q->gp.n_draft > 0 && q->gp.k_policy == SD_K_ADAPTIVE;
        c->n_ctx_drafted = r->n_prompt;
        if (c->adaptive && sd_draft_type_uses_llm(q->gp.draft_type) &&
            !(c->dview = malloc((size_t)cap * sizeof *c->dview))) {
            sd_req_free(q);
            return sd_errorf(err, SD_ERR_OOM, "request: out of memory");
        }
        if (c->adaptive) {
            sd_adaptive_params ap = sd_adaptive_default_params();
            ap.k_max = q->gp.n_draft;
            ap.draft_prior = q->gp.draft_prior > 0.0
                                 ? q->gp.draft_prior
                                 : sd_engine_draft_prior(b->e, q->gp.draft_type);
            int rc2 = sd_adaptive_init(&c->ctl, &ap, err);
            if (rc2) {
                sd_req_free(q);
                return rc2;
            }
        }
        c->quota_t = quota(b->ts, b->n_ctx, (int64_t)cap + b->p.k_max);
        c->quota_d = b->ds ? quota(b->ds, b->n_ctx_d, (int64_t)cap + b->p.k_max) : 0;
    }
    *out = q;
    return SD_OK;
}

int sd_batcher_submit(sd_batcher *b, const sd_request *r, int64_t *id, sd_error *err) {
    if (id) *id = 0;
    if (!b || !r) return sd_errorf(err, SD_ERR_ARG, "batcher: NULL request");
    int rc = check_request(b, r, err);
    sd_req *q = NULL;
    if (!rc) rc = req_new(b, r, &q, err);
    pthread_mutex_lock(&b->mu);
    if (!rc && (b->closed || b->n_queued >= b->p.max_queue)) {
        rc = sd_errorf(err, SD_ERR_BUSY,
                       b->closed ? "batcher: closed (shutting down)"
                                 : "batcher: the queue is full (%d requests waiting)",
                       b->n_queued);
        sd_req_free(q);
        q = NULL;
    }
    if (rc) {
        b->st.n_rejected++;
        pthread_mutex_unlock(&b->mu);
        return rc;
    }
    q->id = b->next_id++;
    if (b->q_tail)
        b->q_tail->next = q;
    else
        b->q_head = q;
    b->q_tail = q;
    b->n_queued++;
    b->st.n_submitted++;
    b->st.n_queued = b->n_queued;
    if (id) *id = q->id;
    pthread_cond_broadcast(&b->cv);
    pthread_mutex_unlock(&b->mu);
    return SD_OK;
}

int sd_batcher_cancel(sd_batcher *b, int64_t id) {
    int found = -1;
    pthread_mutex_lock(&b->mu);
    for (sd_req *r = b->q_head; r && found; r = r->next)
        if (r->id == id) {
            r->cancel = 1;
            found = 0;
        }
    for (int32_t i = 0; i < b->n_running && found; i++)
        if (b->running[i]->id == id) {
            b->running[i]->cancel = 1;
            found = 0;
        }
    pthread_cond_broadcast(&b->cv);
    pthread_mutex_unlock(&b->mu);
    return found;
}

void sd_batcher_close(sd_batcher *b, int cancel_all) {
    pthread_mutex_lock(&b->mu);
    b->closed = 1;
    if (cancel_all) {
        for (sd_req *r = b->q_head; r; r = r->next)
            r->cancel = 1;
        for (int32_t i = 0; i < b->n_running; i++)
            b->running[i]->cancel = 1;
    }
    pthread_cond_broadcast(&b->cv);
    pthread_mutex_unlock(&b->mu);
}

int sd_batcher_busy(sd_batcher *b) {
    pthread_mutex_lock(&b->mu);
    const int busy = b->n_queued > 0 || b->n_running > 0;
    pthread_mutex_unlock(&b->mu);
    return busy;
}

void sd_batcher_wait(sd_batcher *b, int32_t timeout_ms) {
    if (timeout_ms <= 0) return;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += timeout_ms / 1000;
    ts.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&b->mu);
    if (b->n_queued == 0 && b->n_running == 0) pthread_cond_timedwait(&b->cv, &b->mu, &ts);
    pthread_mutex_unlock(&b->mu);
}

void sd_batcher_get_stats(sd_batcher *b, sd_batcher_stats *out) {
    pthread_mutex_lock(&b->mu);
    *out = b->st;
    pthread_mutex_unlock(&b->mu);
}

int sd_batcher_check(sd_batcher *b, sd_error *err) {
    int rc = sd_session_kv_check(b->ts, err);
    if (rc) return sd_error_prefix(err, rc, "target");
    if (b->ds && (rc = sd_session_kv_check(b->ds, err))) return sd_error_prefix(err, rc, "draft");
    /* Free slots hold nothing. */
    for (int32_t i = 0; i < b->p.n_parallel; i++) {
        if (b->slots[i]) continue;
        if (sd_session_seq_n_past(b->ts, i) != 0 || (b->ds && sd_session_seq_n_past(b->ds, i)))
            return sd_errorf(err, SD_ERR_ARG, "batcher: free slot %d still holds positions", i);
    }
    return SD_OK;
}

void sd_batcher_clear_cache(sd_batcher *b) {
    sd_session_kv_clear_cache(b->ts);
    if (b->ds) sd_session_kv_clear_cache(b->ds);
    pthread_mutex_lock(&b->mu);
    sd_session_kv_stats(b->ts, &b->st.kv);
    if (b->ds) sd_session_kv_stats(b->ds, &b->st.kv_draft);
    pthread_mutex_unlock(&b->mu);
}

void sd_batcher_release(sd_batcher *b, sd_choice *c, int store) {
    if (c->slot < 0) return;
    const int32_t s = c->slot;
    if (store && b->p.prefix_cache) {
        sd_session_seq_store_prefix(b->ts, s);
        if (b->ds) sd_session_seq_store_prefix(b->ds, s);
    }
    sd_session_seq_truncate(b->ts, s, 0, NULL);
    if (b->ds) sd_session_seq_truncate(b->ds, s, 0, NULL);
    b->slots[s] = NULL;
    c->slot = -1;
}
