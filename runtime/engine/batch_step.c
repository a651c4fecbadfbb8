/* runtime/engine/batch_step.c: one step of the batcher (see sd_engine.h): cancellations
 * and admission, every decoding choice's proposal (n-gram per choice, the LLM draft in
 * batched passes), one target pass over decode rows and prefill chunks, verification,
 * the KV commit, emission. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/engine/batcher_impl.h"

/* ---- admission ---- */

/* Blocks the running choices may still take from a pool: quota minus what they map. */
static int64_t outstanding(const sd_batcher *b, const sd_session *s, int draft) {
    int64_t n = 0;
    for (int32_t i = 0; i < b->n_running; i++) {
        const sd_req *r = b->running[i];
        for (int32_t j = 0; j < r->n_choices; j++) {
            const sd_choice *c = &r->ch[j];
            if (c->state == CH_DONE || c->slot < 0) continue;
            const int32_t q = draft ? c->quota_d : c->quota_t;
            const int32_t held = sd_session_kv_blocks_for(s, sd_session_seq_n_past(s, c->slot));
            if (q > held) n += q - held;
        }
    }
    return n;
}

static int32_t free_slot(const sd_batcher *b, int32_t from) {
    for (int32_t s = from; s < b->p.n_parallel; s++)
        if (!b->slots[s]) return s;
    return -1;
}

/* Admit r if slots and blocks allow (its first choice takes the longest cached prefix of
 * its prompt first, which lowers what it needs). 1 if admitted. */
static int try_admit(sd_batcher *b, sd_req *r) {
    int32_t n_free = 0;
    for (int32_t s = 0; s < b->p.n_parallel; s++)
        n_free += !b->slots[s];
    if (n_free < r->n_choices) return 0;
    const int32_t s0 = free_slot(b, 0);
    const int32_t lim = r->n_prompt - 1; /* the last prompt token is fed for its logits */
    int32_t got = 0, got_d = 0;
    if (b->p.prefix_cache) {
        got = sd_session_seq_attach_prefix(b->ts, s0, r->prompt, lim);
        if (b->ds) got_d = sd_session_seq_attach_prefix(b->ds, s0, r->prompt, lim);
    }
    int64_t need_t = 0, need_d = 0;
    for (int32_t i = 0; i < r->n_choices; i++) {
        need_t += r->ch[i].quota_t;
        need_d += r->ch[i].quota_d;
    }
    need_t -= sd_session_kv_blocks_for(b->ts, got);
    if (b->ds) need_d -= sd_session_kv_blocks_for(b->ds, got_d);
    int ok = sd_session_kv_available(b->ts) - outstanding(b, b->ts, 0) >= need_t;
    if (ok && b->ds) ok = sd_session_kv_available(b->ds) - outstanding(b, b->ds, 1) >= need_d;
    if (!ok) { /* wait: give the attached blocks back */
        sd_session_seq_truncate(b->ts, s0, 0, NULL);
        if (b->ds) sd_session_seq_truncate(b->ds, s0, 0, NULL);
        return 0;
    }
    for (int32_t i = 0, s = s0; i < r->n_choices; i++, s = free_slot(b, s + 1)) {
        sd_choice *c = &r->ch[i];
        c->slot = s;
        b->slots[s] = c;
        c->state = i == 0 ? CH_PREFILL : CH_WAIT;
        c->st.n_prompt_cached = got;
        sd_proposer_reset(b->ngram[s], &r->gp.samp, 0);
    }
    b->st.n_prefix_hit_tokens += got;
    b->st.n_prompt_tokens += r->n_prompt;
    b->running[b->n_running++] = r;
    return 1;
}

/* Under the mutex: cancelled queued requests move to *gone. */
static void take_queue(sd_batcher *b, sd_req **gone) {
    sd_req **at = &b->q_head, *last = NULL;
    while (*at) {
        sd_req *r = *at;
        if (r->cancel) {
            *at = r->next;
            r->next = *gone;
            *gone = r;
            b->n_queued--;
            continue;
        }
        last = r;
        at = &r->next;
    }
    b->q_tail = last;
}

/* Under the mutex: FIFO admission while slots and blocks allow. */
static void admit(sd_batcher *b) {
    while (b->q_head && b->n_running < b->p.n_parallel && try_admit(b, b->q_head)) {
        sd_req *r = b->q_head;
        b->q_head = r->next;
        if (!b->q_head) b->q_tail = NULL;
        r->next = NULL;
        b->n_queued--;
    }
}

static void finish_request(sd_batcher *b, sd_req *r, sd_stop_reason stop) {
    for (int32_t i = 0; i < r->n_choices; i++)
        sd_choice_finish(b, &r->ch[i], stop);
}

/* ---- proposals ---- */

/* The draws of choice c are keyed by this seed (choice i of a request: its seed + i). */
static uint64_t seed_of(const sd_choice *c) {
    return c->r->gp.seed + (uint64_t)c->index;
}

/* The LLM draft's view of c->ctx[0 .. n): the context itself, or after a windowed
 * catch-up its first token and ctx[doff + 1 .. n) (in c->dview). *len: its length. */
static const int32_t *draft_view(sd_choice *c, int32_t n, int32_t *len) {
    if (c->doff <= 0 || n <= c->doff + 1) {
        *len = n;
        return c->ctx;
    }
    c->dview[0] = c->ctx[0];
    memcpy(c->dview + 1, c->ctx + c->doff + 1, (size_t)(n - c->doff - 1) * sizeof *c->dview);
    *len = n - c->doff;
    return c->dview;
}

/* The states of choice c's proposal t[0 .. *k) in b->gchain (made on first use), *k cut at
 * the first token its grammar refuses (sd_step_grammar_chain). */
static int grammar_chain(sd_batcher *b, sd_choice *c, const int32_t *t, int32_t *k, sd_error *err) {
    for (int32_t i = 0; i <= SD_MAX_DRAFT; i++)
        if (!b->gchain[i]) {
            const int rc = sd_grammar_state_clone(c->gseq, &b->gchain[i], err);
            if (rc) return rc;
        }
    return sd_step_grammar_chain(c->gseq, &c->r->gp, b->eos, t, k, b->gchain, err);
}

/* A proposal of the LLM draft carries q rows only for rejection sampling; greedy and
 * Gumbel drafts are a function of the context and the keyed noise (one-hot). */
static int draft_rows(const sd_gen_params *gp) {
    return gp->samp.temp > 0.0f && gp->samp.spec == SD_SPEC_REJECTION;
}

/* The K of choice c for this pass (0: a target-alone pass), capped by its budget and
 * context, and its lookup proposal (n-gram or suffix); c->llm when the LLM draft is to
 * propose: the LLM types without a match, and the chained types (ngram+llm, suffix+llm)
 * after a match of m < K tokens, which the LLM continues in the same block from the
 * match's end (as draft/chain.c for generate). Its extended context, the committed
 * tokens then the m lookup tokens, is written in place: c->ctx[n_ctx .. n_ctx + m) (room:
 * cap >= n_ctx + K + 1; the pass's commit overwrites them). */
static int choose_and_lookup(sd_batcher *b, sd_choice *c, sd_error *err) {
    const sd_gen_params *gp = &c->r->gp;
    c->k = 0;
    c->k_lookup = 0;
    c->llm = 0;
    c->used_llm = 0;
    c->one_hot = 0;
    c->tree = 0;
    c->drow = -1;
    c->t_draft_ms = c->c_draft_ms = 0.0;
    const int llm_type = sd_draft_type_uses_llm(gp->draft_type);
    int32_t k = gp->n_draft;
    c->ctl_state = c->adaptive ? sd_adaptive_state_of(&c->ctl) : SD_ADAPTIVE_ON;
    if (c->adaptive)
        k = sd_adaptive_next_k(&c->ctl); /* its batch: plan_k */
    else if (gp->k_policy == SD_K_SWEEP) /* every K in turn (cost traces) */
        k = (int32_t)(c->st.n_target_passes % (gp->n_draft + 1));
    /* The controller decides on or off; a proposer that sizes its drafts by its match
     * (suffix) may draft up to the largest K. */
    if (c->adaptive && k > 0 && gp->draft_type == SD_DRAFT_SUFFIX &&
        sd_proposer_sizes_itself(b->suffix[c->slot]))
        k = gp->n_draft;
    c->k_policy = k;
    k = sd_step_cap_k(gp, k, c->st.n_generated, c->n_ctx, b->n_ctx);
    c->k_want = c->k_want_cap = k;
    if (k == 0) return SD_OK;
    const int suffix = gp->draft_type == SD_DRAFT_SUFFIX || gp->draft_type == SD_DRAFT_SUFFIX_LLM;
    if (gp->draft_type == SD_DRAFT_NGRAM || gp->draft_type == SD_DRAFT_NGRAM_LLM || suffix) {
        const double t = sd_time_ms(), ct = sd_step_clock_ms(SD_CLOCK_THREAD_CPU);
        sd_proposal prop = {0};
        sd_proposer *lookup = suffix ? b->suffix[c->slot] : b->ngram[c->slot];
        /* a token tree (a lookup type alone: the chained ones draft chains, as generate's) */
        const int tree = gp->tree_width > 0 && !llm_type;
        int rc =
            tree ? sd_proposer_propose_tree(lookup, c->ctx, c->n_ctx, gp->tree_width, k, &prop, err)
                 : sd_proposer_propose(lookup, c->ctx, c->n_ctx, k, &prop, err);
        c->t_draft_ms += sd_time_ms() - t;
        c->c_draft_ms += sd_step_clock_ms(SD_CLOCK_THREAD_CPU) - ct;
        if (rc) return rc;
        if (tree) { /* each node takes a KV slot: the first ones (parents first) that fit */
            const int32_t room = b->n_ctx - c->n_ctx > 0 ? b->n_ctx - c->n_ctx : 0;
            if (prop.n > room) prop.n = room;
            memcpy(c->dpar, prop.parent, (size_t)prop.n * sizeof *c->dpar);
            c->tree = prop.n > 0;
        }
        /* Chained: the match's tokens the chain keeps (as draft/chain.c). */
        if (llm_type) prop.n = sd_chain_lookup_keep(lookup, prop.n, k);
        /* The grammar: cut at the first token it refuses; the LLM continues from there. */
        if (c->gseq && prop.n > 0) {
            int32_t n = prop.n;
            if ((rc = grammar_chain(b, c, prop.tokens, &n, err))) return rc;
            prop.n = n;
            if (llm_type && (rc = sd_grammar_state_copy(c->gdraft, b->gchain[n], err))) return rc;
        }
        if (prop.n > 0) {
            c->k = prop.n;
            memcpy(c->dtok, prop.tokens, (size_t)prop.n * sizeof *c->dtok);
            c->one_hot = 1;
            if (prop.n >= k || !llm_type) return SD_OK;
            /* a long match drafts alone (sd_proposer_chain_set_limits) */
            if (gp->chain_long_match > 0 && prop.n >= gp->chain_long_match) return SD_OK;
        }
    }
    if (llm_type) {
        const int32_t m = c->k;
        if (c->gseq && m == 0) {
            const int rc = sd_grammar_state_copy(c->gdraft, c->gseq, err);
            if (rc) return rc;
        }
        SD_CHECK(c->n_ctx + k < c->cap, "choice context has room for the block");
        memcpy(c->ctx + c->n_ctx, c->dtok, (size_t)m * sizeof *c->dtok);
        /* Fewer near the draft's context limit, none for an id it lacks (as the proposer). */
        /* a chain's draft-model share: at most chain_draft_max (as draft/chain.c) */
        const int chained =
            gp->draft_type == SD_DRAFT_NGRAM_LLM || gp->draft_type == SD_DRAFT_SUFFIX_LLM;
        const int32_t k2 = chained && gp->chain_draft_max > 0 && k - m > gp->chain_draft_max
                               ? gp->chain_draft_max
                               : k - m;
        /* After target-alone passes the draft catches up first (draft_phase): the tokens
         * it lacks, or (once a full catch-up proved expensive) a window of the last
         * SD_CATCHUP_WINDOW, its view then the first token and that window (as
         * draft/llm.c's catch-up). */
        c->catchup = c->adaptive && c->ctl_state != SD_ADAPTIVE_ON;
        if (c->catchup && c->catchup_expensive && c->dview) {
            int32_t nv = 0;
            const int32_t *v = draft_view(c, c->n_ctx, &nv);
            const int32_t have = sd_session_seq_keep_prefix(b->ds, c->slot, v, nv - 1);
            if (nv - 1 - have > SD_CATCHUP_WINDOW && c->n_ctx - 1 - SD_CATCHUP_WINDOW > 1)
                c->doff = c->n_ctx - 1 - SD_CATCHUP_WINDOW;
        }
        int32_t n_view = 0;
        const int32_t *view = draft_view(c, c->n_ctx + m, &n_view);
        const int32_t room = sd_draft_room(view, n_view, k2, b->n_ctx_d, b->n_vocab_d);
        c->k_lookup = m;
        c->k_want = m + room;
        c->llm = c->used_llm = room > 0;
        if (room > 0 && m > 0 && draft_rows(gp)) { /* the lookup tokens' q rows: one-hot */
            float *q = b->q[c->slot];
            memset(q, 0, (size_t)m * (size_t)b->n_vocab * sizeof *q);
            for (int32_t i = 0; i < m; i++)
                q[(size_t)i * (size_t)b->n_vocab + (size_t)c->dtok[i]] = 1.0f;
        }
    }
    return SD_OK;
}

/* Token id's entry in a draft row (-1: not in it): the trimmed head's, or id itself below
 * the ids both models share. */
static int32_t draft_entry(const sd_batcher *b, int32_t id) {
    if (id < 0) return -1;
    if (b->n_dhead) return id < b->n_vocab_d ? b->dcol_of[id] : -1;
    return id < b->n_common ? id : -1;
}

/* With ignore_eos the target's rows never let EOS or a stop id win (step.c), so the draft's
 * rows mask them too (-inf): a proposal the target can never accept would only cost the
 * rest of the draft. */
static void draft_mask_ends(const sd_batcher *b, const sd_gen_params *gp, float *l) {
    int32_t e = draft_entry(b, b->eos);
    if (e >= 0) l[e] = -INFINITY;
    for (int32_t j = 0; j < gp->n_stop_ids && j < SD_MAX_STOP_IDS; j++)
        if ((e = draft_entry(b, gp->stop_ids[j])) >= 0) l[e] = -INFINITY;
}

/* Draft position c->k of choice c from its draft logits row l (changed in place) by the
 * LLM proposer's rule (sd_draft_row, draft/llm.c: one implementation for generate and
 * serve). Its context: the committed tokens then a chain's lookup tokens, c->ctx[0 ..
 * n_ctx + k_lookup) (choose_and_lookup wrote them), and its own drafts after them. */
static int draft_row(sd_batcher *b, sd_choice *c, float *l, sd_error *err) {
    const sd_gen_params *gp = &c->r->gp;
    if (!c->drule.samp) { /* the request's rule, made once */
        const int32_t n = b->n_dhead ? b->n_dhead : b->n_common;
        const sd_draft_rule rule = {.samp = &gp->samp,
                                    .seed = seed_of(c),
                                    .n = n,
                                    .head = b->n_dhead ? b->dhead : NULL,
                                    .col_of = b->n_dhead ? b->dcol_of : NULL,
                                    .n_ids = b->n_dhead ? b->n_vocab_d : n,
                                    .n_vocab_out = b->n_vocab,
                                    .p_min = gp->draft_p_min,
                                    .n_min = gp->draft_min,
                                    .gram = c->gseq ? c->gdraft : NULL,
                                    .gv = gp->grammar_vocab,
                                    .ends = c->dends,
                                    .n_ends =
                                        c->gseq ? sd_step_grammar_ends(gp, b->eos, c->dends) : 0,
                                    .gbits = b->gbits,
                                    .qrow = b->dqrow,
                                    .scratch = b->iscratch};
        c->drule = rule;
    }
    const int32_t m = c->k_lookup, i = c->k - m; /* its own drafts so far */
    float *q = draft_rows(gp) ? b->q[c->slot] + (size_t)c->k * (size_t)b->n_vocab : NULL;
    int32_t tok;
    if (gp->ignore_eos) draft_mask_ends(b, gp, l);
    const int rc = sd_draft_row(&c->drule, l, c->ctx, c->n_ctx + m, c->dtok + m, i, q, &tok, err);
    if (rc) return sd_error_prefix(err, rc, "%s: draft", sd_model_path(b->dm));
    if (tok < 0) { /* the grammar or the cut-off ends the draft */
        c->llm = 0;
        return SD_OK;
    }
    c->dtok[c->k] = tok;
    c->k++;
    c->one_hot = 0; /* an LLM token: q rows under rejection sampling, not a lookup pass */
    if (c->k >= c->k_want) c->llm = 0;
    return SD_OK;
}

/* Add tokens t[0 .. n) of draft sequence seq to the draft batch, the last with logits
 * when want. Returns the row of the logits or -1. */
static int32_t dbatch_add(sd_batcher *b, int32_t *nb, int32_t *nrow, int32_t seq, const int32_t *t,
                          int32_t n, int want) {
    for (int32_t i = 0; i < n; i++, (*nb)++) {
        b->dbtok[*nb] = t[i];
        b->dbseq[*nb] = seq;
        b->dbwant[*nb] = want && i == n - 1;
    }
    return want && n > 0 ? (*nrow)++ : -1;
}

/* One draft pass over the nb tokens of the draft batch, then each choice's row (c->drow)
 * drafted from its logits (its time reaches each drafting choice's controller through
 * the step's drafting time, sd_batcher_step). */
static int draft_pass(sd_batcher *b, int32_t nb, sd_error *err) {
    sd_batch bt = {nb, b->dbtok, NULL, b->dbseq, b->dbwant};
    int rc = sd_session_decode(b->ds, &bt, b->dlogits, err);
    if (rc) {
        sd_error_prefix(err, rc, "%s: draft", sd_model_path(b->dm));
        return rc;
    }
    for (int32_t i = 0; i < b->n_running; i++) {
        sd_req *r = b->running[i];
        for (int32_t j = 0; j < r->n_choices; j++) {
            sd_choice *c = &r->ch[j];
            if (c->drow < 0) continue;
            rc = draft_row(b, c, b->dlogits + (size_t)c->drow * (size_t)b->n_dlog, err);
            c->drow = -1;
            if (rc) return rc;
        }
    }
    return SD_OK;
}

/* The LLM draft's passes of this step: the prompts' catch-up (PREFILL choices, one
 * chunk each), then for every choice with c->llm the catch-up to ctx[0 .. n - 1) in
 * chunks and its first position, then one pass per further position. */
/* The catch-up after target-alone passes of every choice that drafts with the LLM this
 * step (c->catchup): the tokens its draft lacks (of its view) but the last, in passes of
 * their own, timed apart (the statistics' drafting time, not the controller's: its
 * per-token draft cost stays the cost of drafting). A full catch-up of
 * SD_CATCHUP_WINDOW tokens or more that cost more than SD_CATCHUP_BUDGET target-alone
 * passes per token makes the next ones windowed (choose_and_lookup). */
static int catch_up(sd_batcher *b, sd_error *err) {
    const int32_t chunk = b->p.draft_chunk;
    int sel[SD_MAX_SEQ] = {0}, todo[SD_MAX_SEQ] = {0};
    int any = 0;
    for (int32_t s = 0; s < b->p.n_parallel; s++) {
        const sd_choice *c = b->slots[s];
        if (!c || c->state != CH_DECODE || !c->llm || !c->catchup || c->k > c->k_lookup) continue;
        sel[s] = todo[s] = 1;
        any = 1;
    }
    if (!any) return SD_OK;
    const double t0 = sd_time_ms(), c0 = sd_step_clock_ms(SD_CLOCK_THREAD_CPU);
    for (int more = 1; more;) {
        int32_t nb = 0, nrow = 0;
        more = 0;
        for (int32_t s = 0; s < b->p.n_parallel; s++) {
            sd_choice *c = b->slots[s];
            if (!todo[s]) continue;
            int32_t n = 0;
            const int32_t *v = draft_view(c, c->n_ctx, &n);
            const int32_t kept = sd_session_seq_keep_prefix(b->ds, c->slot, v, n - 1);
            int32_t m = n - 1 - kept;
            if (m > chunk) {
                m = chunk;
                more = 1;
            }
            for (int32_t t = 0; t < m; t++) /* ids the draft lacks: drafting stops there */
                if (v[kept + t] >= b->n_vocab_d) m = t;
            if (m > 0) dbatch_add(b, &nb, &nrow, c->slot, v + kept, m, 0);
            if (m == 0) todo[s] = 0;
        }
        if (nb == 0) break;
        sd_batch bt = {nb, b->dbtok, NULL, b->dbseq, b->dbwant};
        const int rc = sd_session_decode(b->ds, &bt, b->dlogits, err);
        if (rc) return sd_error_prefix(err, rc, "%s: draft", sd_model_path(b->dm));
    }
    const double t = sd_time_ms() - t0, ct = sd_step_clock_ms(SD_CLOCK_THREAD_CPU) - c0;
    for (int32_t s = 0; s < b->p.n_parallel; s++) {
        sd_choice *c = b->slots[s];
        if (!sel[s]) continue;
        c->st.t_draft_ms += t; /* shared passes: each catching-up choice's time */
        const int32_t n = c->n_ctx - c->n_ctx_drafted;
        if (c->doff == 0 && n >= SD_CATCHUP_WINDOW) {
            const double cost = c->r->gp.clock == SD_CLOCK_THREAD_CPU ? ct : t;
            c->catchup_expensive = cost / n > SD_CATCHUP_BUDGET * sd_adaptive_pass_ms(&c->ctl, 1);
        }
    }
    return SD_OK;
}

static int draft_phase(sd_batcher *b, sd_error *err) {
    if (!b->ds) return SD_OK;
    const int32_t chunk = b->p.draft_chunk;
    int first = 1;
    for (;;) { /* catch-up passes, the last one with every drafting choice's first row */
        int32_t nb = 0, nrow = 0, pending = 0;
        for (int32_t i = 0; i < b->n_running; i++) {
            sd_req *r = b->running[i];
            const int llm_type = sd_draft_type_uses_llm(r->gp.draft_type);
            for (int32_t j = 0; j < r->n_choices; j++)
                r->ch[j].drow = -1;
            for (int32_t j = 0; j < r->n_choices && llm_type; j++) {
                sd_choice *c = &r->ch[j];
                if (c->state == CH_PREFILL && first) {
                    /* Follow the prompt: its tokens but the last, up to what the target
                     * has (or will have after this step's chunk) and ids the draft has. */
                    const int32_t goal =
                        r->n_prompt - 1 < b->n_ctx_d ? r->n_prompt - 1 : b->n_ctx_d;
                    const int32_t kept = sd_session_seq_keep_prefix(b->ds, c->slot, c->ctx, goal);
                    int32_t n = goal - kept < chunk ? goal - kept : chunk;
                    for (int32_t t = 0; t < n; t++)
                        if (c->ctx[kept + t] >= b->n_vocab_d) n = t;
                    if (n > 0) dbatch_add(b, &nb, &nrow, c->slot, c->ctx + kept, n, 0);
                    continue;
                }
                if (c->state != CH_DECODE || !c->llm || c->k > c->k_lookup) continue;
                /* The context, extended by a chain's lookup tokens (choose_and_lookup), as
                 * the draft sees it (draft_view). */
                int32_t n_ext = 0;
                const int32_t *v = draft_view(c, c->n_ctx + c->k_lookup, &n_ext);
                const int32_t kept = sd_session_seq_keep_prefix(b->ds, c->slot, v, n_ext - 1);
                const int32_t missing = n_ext - 1 - kept;
                if (missing <= chunk) { /* the rest and the last token, for its logits */
                    c->drow = dbatch_add(b, &nb, &nrow, c->slot, v + kept, missing + 1, 1);
                } else {
                    dbatch_add(b, &nb, &nrow, c->slot, v + kept, chunk, 0);
                    pending = 1;
                }
            }
        }
        first = 0;
        if (nb == 0) break;
        const int rc = draft_pass(b, nb, err);
        if (rc) return rc;
        if (!pending) break;
    }
    for (;;) { /* positions 2 .. K: one token per choice still drafting */
        int32_t nb = 0, nrow = 0;
        for (int32_t i = 0; i < b->n_running; i++) {
            sd_req *r = b->running[i];
            for (int32_t j = 0; j < r->n_choices; j++) {
                sd_choice *c = &r->ch[j];
                c->drow = -1;
                if (c->state != CH_DECODE || !c->llm || c->k == c->k_lookup) continue;
                c->drow = dbatch_add(b, &nb, &nrow, c->slot, &c->dtok[c->k - 1], 1, 1);
            }
        }
        if (nb == 0) break;
        const int rc = draft_pass(b, nb, err);
        if (rc) return rc;
    }
    return SD_OK;
}

/* The tokens a decoding choice's pass yields on average so far (1 before its first). */
static double yield_of(const sd_choice *c) {
    const sd_gen_stats *st = &c->st;
    return st->n_target_passes > 0
               ? (double)(st->n_generated + st->n_stop_tokens) / (double)st->n_target_passes
               : 1.0;
}

/* Every adaptive choice's batch for this step's K (sd_adaptive_set_batch: the one
 * controller in batch mode): the adaptive choices decoding (taken to draft alike), the
 * rest of the pass (the fixed-K choices' rows, at most 1 + K each, and the prompt chunks
 * that fit beside them) and what the rest yields, and the measured cost line of the
 * target's passes. Alone in its pass a choice's controller decides as for one sequence. */
static void plan_k(sd_batcher *b) {
    int32_t rows = 0, n_adaptive = 0;
    double yield = 0.0;
    for (int32_t i = 0; i < b->n_running; i++) {
        const sd_req *r = b->running[i];
        for (int32_t j = 0; j < r->n_choices; j++) {
            const sd_choice *c = &r->ch[j];
            if (c->state != CH_DECODE) continue;
            if (c->adaptive) {
                n_adaptive++;
                continue;
            }
            rows += 1 + r->gp.n_draft;
            yield += yield_of(c);
        }
    }
    if (n_adaptive == 0) return;
    for (int32_t i = 0; i < b->n_running; i++) { /* the prompt chunks that fit beside them */
        const sd_choice *c = &b->running[i]->ch[0];
        if (c->state != CH_PREFILL) continue;
        const int32_t left = c->r->n_prompt - 1 - sd_session_seq_n_past(b->ts, c->slot);
        const int32_t room = b->p.n_batch - rows - n_adaptive;
        rows += left < room ? left : (room > 0 ? room : 0);
    }
    sd_adaptive_batch bt;
    memset(&bt, 0, sizeof bt);
    bt.pass = b->tfit;
    bt.n_seqs = n_adaptive;
    bt.base_rows = rows;
    bt.base_yield = yield;
    for (int32_t i = 0; i < b->n_running; i++) {
        sd_req *r = b->running[i];
        for (int32_t j = 0; j < r->n_choices; j++)
            if (r->ch[j].state == CH_DECODE && r->ch[j].adaptive)
                sd_adaptive_set_batch(&r->ch[j].ctl, &bt);
    }
}

/* ---- the target pass and verification ---- */

static void tbatch_add(sd_batcher *b, int32_t *nb, int32_t *nrow, int32_t seq, const int32_t *t,
                       int32_t n, int want_all, int want_last) {
    for (int32_t i = 0; i < n; i++, (*nb)++) {
        b->btok[*nb] = t[i];
        b->bseq[*nb] = seq;
        /* a chain: the row before in the sequence's run (-1: the run's first row) */
        b->bpar[*nb] = *nb > 0 && b->bseq[*nb - 1] == seq ? b->bpar[*nb - 1] + 1 : -1;
        b->bwant[*nb] = want_all || (want_last && i == n - 1);
        *nrow += b->bwant[*nb];
    }
}

/* gp's synthetic rejection (sd_gen_params.synth_accept) over a draft of k tokens whose
 * first is chosen at context position pos: the number of draft tokens verification may
 * read (the first forced rejection's position; k without one). */
static int32_t synth_cut(const sd_gen_params *gp, uint64_t seed, int32_t pos, int32_t k) {
    if (!gp->synth_accept) return k;
    for (int32_t i = 0; i < k; i++) {
        const double p = i < gp->n_synth_accept ? gp->synth_accept[i] : 0.0;
        /* index 1: not the draw of verification's own acceptance test (index 0) */
        if (!(sd_key_uniform(seed, (int64_t)pos + i, SD_DRAW_ACCEPT, 1) < p)) return i;
    }
    return k;
}

/* After the pass: verify choice c (state DECODE) on rows, count the pass and commit
 * (step.c), then its text and the KV commit. Verification reads every
 * draw keyed by the choice's seed and the positions: greedy, Gumbel (the text then
 * depends on neither the draft nor K) or rejection sampling. */
static int after_decode(sd_batcher *b, sd_choice *c, float *rows, double t_pass_ms,
                        double c_pass_ms, sd_error *err) {
    const sd_gen_params *gp = &c->r->gp;
    /* the controller's times: the thread's CPU clock when the request asks (a one-thread
     * CPU engine's generate), else the wall clock */
    const int cpu = gp->clock == SD_CLOCK_THREAD_CPU;
    const double ctl_draft = cpu ? c->c_draft_ms : c->t_draft_ms;
    const double ctl_pass = cpu ? c_pass_ms : t_pass_ms;
    int32_t k = c->k;
    int rc = sd_target_check_rows(b->tm, rows, k + 1, err);
    if (rc) return rc;
    if (c->lp && !b->raw) { /* the first request that asks for logprobs: the raw rows */
        b->raw = malloc((size_t)(b->p.k_max + 1) * (size_t)b->n_vocab * sizeof *b->raw);
        if (!b->raw) return sd_errorf(err, SD_ERR_OOM, "batcher: out of memory (logprobs rows)");
    }
    /* The grammar: row i's state; the rows past a refused draft are not read. */
    if (c->gseq && (rc = grammar_chain(b, c, c->dtok, &k, err))) return rc;
    const int32_t k_drafted = k, k_verified = c->tree ? k : synth_cut(gp, seed_of(c), c->n_ctx, k);
    k = k_verified;
    const int32_t first_new = c->n_ctx;
    sd_step_pass p = {.gp = gp,
                      .eos = b->eos,
                      .n_vocab = b->n_vocab,
                      .seed = seed_of(c),
                      .ctx = c->ctx,
                      .n_ctx = c->n_ctx,
                      .draft = c->dtok,
                      .k = k,
                      /* q rows: an LLM draft's under rejection sampling (none without a
                         draft model: b->q is NULL, and a target-alone pass reads none) */
                      .q = b->q && !c->one_hot && draft_rows(gp) ? b->q[c->slot] : NULL,
                      .lookup = c->one_hot,
                      .logits = rows,
                      .probs = b->probs,
                      .residual = b->residual,
                      .iscratch = b->iscratch,
                      .st = &c->st,
                      .raw = c->lp ? b->raw : NULL,
                      .lp = c->lp ? b->lp : NULL,
                      .gseq = c->gseq,
                      .gchain = c->gseq ? b->gchain : NULL,
                      .gbits = b->gbits};
    int32_t path[SD_MAX_DRAFT];
    if (c->tree) { /* verified by target choice */
        p.parent = c->dpar;
        p.path = path;
    }
    sd_verify_result res;
    if ((rc = sd_step_finish(&p, &res, err))) return rc;
    /* a synthetic rejection: the positions past the cut were drafted too */
    c->st.n_drafted += k_drafted - k_verified;
    for (int32_t i = k_verified; i < k_drafted; i++)
        c->st.drafted_at[i]++;
    k = k_drafted;
    if (c->lp) /* entry out0 + i of the output: ctx[n_prompt + i] */
        memcpy(c->lp + c->out0 + (first_new - c->r->n_prompt), b->lp,
               (size_t)p.n_committed * sizeof *b->lp);
    c->n_ctx = p.n_ctx;
    /* stop_at_context: a full context ends the choice (the budget first) */
    if (c->r->stop_at_context && c->st.stop == SD_STOP_NONE && c->n_ctx > b->n_ctx)
        c->st.stop = SD_STOP_CONTEXT;
    c->st.t_draft_ms += c->t_draft_ms;
    c->st.t_verify_ms += t_pass_ms;
    if (c->adaptive && c->ctl_state != SD_ADAPTIVE_ON && c->k_want_cap == 0) {
        c->st.n_off_passes++; /* a target-alone pass while speculation was off */
        c->st.t_off_ms += t_pass_ms;
    }
    sd_choice_text(b, c, first_new);
    /* KV commit: both caches keep only the committed tokens (the target all but the last;
     * after a tree pass, the accepted path's rows first follow the root's). */
    if (c->tree) {
        int32_t keep[SD_MAX_DRAFT + 1];
        keep[0] = 0; /* the root: the last committed token before the pass */
        for (int32_t i = 0; i < res.n_accepted; i++)
            keep[i + 1] = path[i] + 1;
        rc = sd_session_seq_tree_keep(b->ts, c->slot, first_new - 1, keep, res.n_accepted + 1, err);
        if (rc) return sd_error_prefix(err, rc, "%s: target", sd_model_path(b->tm));
    }
    sd_session_seq_keep_prefix(b->ts, c->slot, c->ctx, c->n_ctx - 1);
    if (b->ds) {
        int32_t n_view = 0;
        const int32_t *view = draft_view(c, c->n_ctx, &n_view);
        sd_session_seq_keep_prefix(b->ds, c->slot, view, n_view);
    }
    if (c->used_llm) c->n_ctx_drafted = first_new;
    sd_proposer_commit(b->ngram[c->slot], c->ctx, c->n_ctx);
    if (c->r->gp.draft_type == SD_DRAFT_SUFFIX || c->r->gp.draft_type == SD_DRAFT_SUFFIX_LLM)
        sd_proposer_commit(b->suffix[c->slot], c->ctx, c->n_ctx);
    if (c->adaptive) {
        sd_adaptive_observe(&c->ctl, k, res.n_accepted, ctl_draft, ctl_pass);
        c->st.n_switch_off = c->ctl.n_switch_off;
        c->st.n_probes = c->ctl.n_probes;
    }
    const int32_t i = c->st.n_target_passes - 1; /* the traces: the first choice's */
    if (c->index == 0 && gp->k_trace && i < gp->k_trace_cap) gp->k_trace[i] = (uint8_t)k;
    if (c->index == 0 && gp->pass_trace && i < gp->pass_trace_cap) {
        sd_pass_record rec = {c->k_want_cap,
                              k,
                              res.n_accepted,
                              (int32_t)c->ctl_state,
                              ctl_draft,
                              ctl_pass,
                              0,
                              0,
                              0,
                              0,
                              c->k_policy,
                              c->k_lookup > 0 && k > c->k_lookup ? c->k_lookup : 0};
        if (c->adaptive) {
            rec.k_best = sd_adaptive_best_k(&c->ctl);
            rec.speedup = sd_adaptive_speedup(&c->ctl, rec.k_best);
            const double v1 = sd_adaptive_pass_ms(&c->ctl, 1);
            rec.c_rel = sd_adaptive_draft_ms(&c->ctl) / v1;
            rec.v_rel = sd_adaptive_pass_ms(&c->ctl, rec.k_best + 1) / v1;
        }
        gp->pass_trace[i] = rec;
    }
    return SD_OK;
}

/* A request whose prompt is evaluated (the target holds all of it but its last token,
 * as between two passes) starts decoding: the other choices share choice 0's blocks,
 * and every choice's first pass drafts like any other. */
static int start_decode(sd_batcher *b, sd_req *r, sd_error *err) {
    sd_choice *c0 = &r->ch[0];
    const int32_t n = r->n_prompt - 1;
    for (int32_t i = 1; i < r->n_choices; i++) {
        sd_choice *c = &r->ch[i];
        if (c->state == CH_DONE) continue;
        int rc = n > 0 ? sd_session_seq_fork(b->ts, c->slot, c0->slot, n, err) : SD_OK;
        const int32_t nd = b->ds ? sd_session_seq_n_past(b->ds, c0->slot) : 0;
        if (!rc && nd > 0) rc = sd_session_seq_fork(b->ds, c->slot, c0->slot, nd, err);
        if (rc) return rc;
    }
    const double t = sd_time_ms() - r->t_submit;
    for (int32_t i = 0; i < r->n_choices; i++) {
        sd_choice *c = &r->ch[i];
        if (c->state == CH_DONE) continue;
        c->state = CH_DECODE;
        if (c->n_shifts == 0) c->st.t_prefill_ms = t; /* the first segment's */
    }
    return SD_OK;
}

/* Every admitted request whose prompt the target now holds starts decoding. */
static int start_decoding(sd_batcher *b, sd_error *err) {
    int rc = SD_OK;
    for (int32_t i = 0; i < b->n_running; i++) {
        sd_req *r = b->running[i];
        const sd_choice *c0 = &r->ch[0];
        if (c0->state != CH_PREFILL || sd_session_seq_n_past(b->ts, c0->slot) < r->n_prompt - 1)
            continue;
        const int rc1 = start_decode(b, r, err);
        if (rc1) {
            finish_request(b, r, SD_STOP_NONE);
            if (!rc) rc = rc1;
        }
    }
    return rc;
}

/* ---- the step ---- */

/* A prompt-progress event of r's first choice; a non-zero answer cancels r. */
static void progress_event(sd_batcher *b, sd_req *r) {
    const sd_choice *c0 = &r->ch[0];
    if (sd_choice_progress(b, &r->ch[0], sd_session_seq_n_past(b->ts, c0->slot))) {
        pthread_mutex_lock(&b->mu);
        r->cancel = 1;
        pthread_mutex_unlock(&b->mu);
    }
}

static void compact(sd_batcher *b);

/* gp.context_shift: choice c (its request's only one) stopped at a full context with its
 * budget left and kept tokens that leave room. 1 if it goes on after a shift. */
static int can_shift(const sd_batcher *b, const sd_choice *c) {
    const sd_req *r = c->r;
    return r->gp.context_shift && c->stop == SD_STOP_CONTEXT && c->st.stop == SD_STOP_CONTEXT &&
           c->st.n_generated < r->gp.n_predict && r->n_keep < b->n_ctx / 2 && c->n_ctx > r->n_keep;
}

/* The context shift of choice c (can_shift; its tokens given): its context ctx[0 .. n_ctx)
 * keeps its first r->n_keep tokens and drops the older half of the rest
 * (sd_ctx_shift_window), and becomes the prompt of the next segment: the choice prefills
 * it in its own sequence from the kept prefix (the rest of both caches is dropped: their
 * rows attended to the dropped run), then decodes on. Its statistics, controller,
 * grammar state, text and budget go on; the lookup proposers re-index the new context at
 * their next sync. */
static void shift_choice(sd_batcher *b, sd_choice *c) {
    sd_req *r = c->r;
    c->out0 += c->n_ctx - r->n_prompt;
    c->n_ctx -= sd_ctx_shift_window(c->ctx, c->n_ctx, r->n_keep);
    r->n_prompt = c->n_ctx;
    c->n_emitted_sent = c->n_ctx;
    c->n_ctx_drafted = c->n_ctx;
    c->doff = 0;
    c->catchup = 0;
    c->stop = c->st.stop = SD_STOP_NONE;
    c->state = CH_PREFILL;
    c->n_shifts++;
    sd_session_seq_keep_prefix(b->ts, c->slot, c->ctx, c->n_ctx - 1);
    if (b->ds) sd_session_seq_keep_prefix(b->ds, c->slot, c->ctx, c->n_ctx - 1);
}

/* Events for every choice that moved, finishing those that stopped (a full context with
 * gp.context_shift: shifted instead); the callback's non-zero return cancels its
 * request. */
static void deliver(sd_batcher *b) {
    for (int32_t i = 0; i < b->n_running; i++) {
        sd_req *r = b->running[i];
        int cancel = 0;
        for (int32_t j = 0; j < r->n_choices; j++) {
            sd_choice *c = &r->ch[j];
            if (c->state == CH_DONE) continue;
            if (c->failed) {
                sd_choice_finish(b, c, SD_STOP_NONE);
            } else if (can_shift(b, c)) {
                c->stop = c->st.stop = SD_STOP_NONE; /* its tokens, then the shift */
                if (sd_choice_event(b, c) != 0)
                    cancel = 1;
                else
                    shift_choice(b, c);
            } else if (c->stop != SD_STOP_NONE)
                sd_choice_finish(b, c, c->stop);
            else if (c->state == CH_DECODE && sd_choice_event(b, c) != 0)
                cancel = 1;
        }
        if (cancel) finish_request(b, r, SD_STOP_CANCEL);
    }
}

/* Drop finished requests from the running list (keeping admission order). */
static void compact(sd_batcher *b) {
    int32_t w = 0;
    for (int32_t i = 0; i < b->n_running; i++) {
        sd_req *r = b->running[i];
        if (r->n_done == r->n_choices) {
            int cancelled = 0;
            for (int32_t j = 0; j < r->n_choices; j++)
                cancelled |= r->ch[j].stop == SD_STOP_CANCEL;
            b->st.n_finished += !cancelled;
            b->st.n_cancelled += cancelled;
            sd_req_free(r);
        } else {
            b->running[w++] = r;
        }
    }
    b->n_running = w;
}

static void update_stats(sd_batcher *b, int64_t gen, int64_t drafted, int64_t accepted,
                         int64_t rows, int passes, double t_ms) {
    b->st.n_generated += gen;
    b->st.n_drafted += drafted;
    b->st.n_accepted += accepted;
    b->st.n_pass_rows += rows;
    b->st.n_target_passes += passes;
    b->st.t_busy_ms += t_ms;
    b->st.n_queued = b->n_queued;
    b->st.n_running = b->n_running;
    sd_session_kv_stats(b->ts, &b->st.kv);
    if (b->ds) sd_session_kv_stats(b->ds, &b->st.kv_draft);
    /* Tokens per second over the last ~10 s: the oldest sample in the window. */
    const double now = sd_time_ms();
    b->rate_i = (b->rate_i + 1) % SD_RATE_SAMPLES;
    b->rate_t[b->rate_i] = now;
    b->rate_n[b->rate_i] = b->st.n_generated;
    int32_t old = b->rate_i;
    for (int32_t i = 1; i < SD_RATE_SAMPLES; i++) {
        const int32_t j = (b->rate_i - i + SD_RATE_SAMPLES) % SD_RATE_SAMPLES;
        if (b->rate_t[j] <= 0.0 || now - b->rate_t[j] > 10000.0) break;
        old = j;
    }
    const double dt = now - b->rate_t[old];
    b->st.tokens_per_s = dt > 0.0 ? (double)(b->st.n_generated - b->rate_n[old]) * 1e3 / dt : 0.0;
}

int sd_batcher_step(sd_batcher *b, sd_error *err) {
    const double t0 = sd_time_ms();
    sd_req *gone = NULL;
    pthread_mutex_lock(&b->mu);
    take_queue(b, &gone);
    int any_cancel = 0;
    for (int32_t i = 0; i < b->n_running; i++)
        any_cancel |= b->running[i]->cancel;
    pthread_mutex_unlock(&b->mu);
    /* Cancelled before admission: a done event per choice, nothing was held. */
    for (sd_req *r = gone; r;) {
        sd_req *n = r->next;
        finish_request(b, r, SD_STOP_CANCEL);
        pthread_mutex_lock(&b->mu);
        b->st.n_cancelled++;
        pthread_mutex_unlock(&b->mu);
        sd_req_free(r);
        r = n;
    }
    if (any_cancel)
        for (int32_t i = 0; i < b->n_running; i++)
            if (b->running[i]->cancel) finish_request(b, b->running[i], SD_STOP_CANCEL);
    /* Admission after the cancellations, so their blocks serve the queue at once. */
    pthread_mutex_lock(&b->mu);
    compact(b);
    admit(b);
    pthread_mutex_unlock(&b->mu);
    /* Prompt progress: the admitted requests' first event (the cached positions). */
    for (int32_t i = 0; i < b->n_running; i++) {
        sd_req *r = b->running[i];
        if (!r->progress || r->progress_sent || r->ch[0].slot < 0) continue;
        r->progress_sent = 1;
        progress_event(b, r);
    }

    int64_t gen0 = 0, drafted0 = 0, accepted0 = 0;
    for (int32_t i = 0; i < b->n_running; i++)
        for (int32_t j = 0; j < b->running[i]->n_choices; j++) {
            const sd_choice *c = &b->running[i]->ch[j];
            gen0 += c->st.n_generated;
            drafted0 += c->st.n_drafted;
            accepted0 += c->st.n_accepted;
        }

    for (int32_t i = 0; i < b->n_running; i++)
        for (int32_t j = 0; j < b->running[i]->n_choices; j++)
            b->running[i]->ch[j].in_pass = 0;

    /* 1. Proposals (requests whose prompt is in start decoding first; a failed fork ends
     * its own request only, and the step returns its error after the pass). */
    const int rc_start = start_decoding(b, err);
    int rc = SD_OK;
    plan_k(b);
    for (int32_t i = 0; i < b->n_running && !rc; i++) {
        sd_req *r = b->running[i];
        for (int32_t j = 0; j < r->n_choices && !rc; j++)
            if (r->ch[j].state == CH_DECODE) rc = choose_and_lookup(b, &r->ch[j], err);
    }
    if (!rc && b->ds) rc = catch_up(b, err); /* timed apart */
    const double td0 = sd_time_ms(), cd0 = sd_step_clock_ms(SD_CLOCK_THREAD_CPU);
    if (!rc) rc = draft_phase(b, err);
    const double t_draft = sd_time_ms() - td0;
    const double c_draft = sd_step_clock_ms(SD_CLOCK_THREAD_CPU) - cd0;

    /* 2. The target pass: decode rows first (chains and token trees: one pass,
     * sd_session_decode_trees), then prompt chunks in admission order. */
    int32_t nb = 0, nrow = 0;
    int any_tree = 0;
    for (int32_t i = 0; i < b->n_running && !rc; i++) {
        sd_req *r = b->running[i];
        for (int32_t j = 0; j < r->n_choices; j++) {
            sd_choice *c = &r->ch[j];
            if (c->state != CH_DECODE) continue;
            if (c->used_llm) { /* the LLM passes are shared */
                c->t_draft_ms += t_draft;
                c->c_draft_ms += c_draft;
            }
            c->in_pass = 1;
            c->row0 = nrow;
            c->n_rows = c->k + 1;
            const int32_t at = nb;
            tbatch_add(b, &nb, &nrow, c->slot, &c->ctx[c->n_ctx - 1], 1, 1, 0);
            tbatch_add(b, &nb, &nrow, c->slot, c->dtok, c->k, 1, 0);
            if (c->tree) { /* a token tree: [its last committed token, then its nodes] */
                any_tree = 1;
                for (int32_t t = 0; t < c->k; t++)
                    b->bpar[at + 1 + t] = c->dpar[t] < 0 ? 0 : c->dpar[t] + 1;
            }
        }
    }
    for (int32_t i = 0; i < b->n_running && !rc; i++) {
        sd_choice *c = &b->running[i]->ch[0];
        if (c->state != CH_PREFILL || nb >= b->p.n_batch) continue;
        /* The prompt but its last token, fed with the first pass's drafts. */
        const int32_t p = sd_session_seq_n_past(b->ts, c->slot);
        const int32_t left = c->r->n_prompt - 1 - p, room = b->p.n_batch - nb;
        c->prefill_n = left <= room ? left : room;
        c->in_pass = 1;
        c->row0 = nrow;
        c->n_rows = 0;
        tbatch_add(b, &nb, &nrow, c->slot, c->ctx + p, c->prefill_n, 0, 0);
    }
    double t_pass = 0.0, c_pass = 0.0;
    if (!rc && nb > 0) {
        const double tp = sd_time_ms(), cp = sd_step_clock_ms(SD_CLOCK_THREAD_CPU);
        sd_batch bt = {nb, b->btok, NULL, b->bseq, b->bwant};
        rc = sd_session_decode_trees(b->ts, &bt, any_tree ? b->bpar : NULL, b->logits, err);
        if (rc) sd_error_prefix(err, rc, "%s: target", sd_model_path(b->tm));
        t_pass = sd_time_ms() - tp;
        c_pass = sd_step_clock_ms(SD_CLOCK_THREAD_CPU) - cp;
        if (!rc) sd_cost_fit_add(&b->tfit, (double)nb, t_pass);
    }

    /* 3. Verification, commit, emission. */
    for (int32_t i = 0; i < b->n_running && !rc; i++) {
        sd_req *r = b->running[i];
        if (r->ch[0].state == CH_PREFILL) continue; /* its prompt chunk has no rows */
        for (int32_t j = 0; j < r->n_choices && !rc; j++)
            if (r->ch[j].state == CH_DECODE && r->ch[j].in_pass)
                rc = after_decode(b, &r->ch[j],
                                  b->logits + (size_t)r->ch[j].row0 * (size_t)b->n_vocab, t_pass,
                                  c_pass, err);
    }
    /* Prompt progress after each chunk but the prompt's last (its last token goes with
     * the first decoding pass). */
    for (int32_t i = 0; i < b->n_running && !rc; i++) {
        sd_req *r = b->running[i];
        if (r->progress && r->ch[0].state == CH_PREFILL && r->ch[0].in_pass &&
            r->ch[0].n_shifts == 0 && sd_session_seq_n_past(b->ts, r->ch[0].slot) < r->n_prompt - 1)
            progress_event(b, r);
    }
    if (rc) { /* a model error ends every request of the pass */
        for (int32_t i = 0; i < b->n_running; i++) {
            sd_req *r = b->running[i];
            int hit = 0;
            for (int32_t j = 0; j < r->n_choices; j++)
                hit |= r->ch[j].in_pass || r->ch[j].state == CH_DECODE;
            if (hit) finish_request(b, r, SD_STOP_NONE);
        }
    }
    deliver(b);

    int64_t gen1 = 0, drafted1 = 0, accepted1 = 0;
    for (int32_t i = 0; i < b->n_running; i++)
        for (int32_t j = 0; j < b->running[i]->n_choices; j++) {
            const sd_choice *c = &b->running[i]->ch[j];
            gen1 += c->st.n_generated;
            drafted1 += c->st.n_drafted;
            accepted1 += c->st.n_accepted;
        }
    pthread_mutex_lock(&b->mu);
    compact(b);
    update_stats(b, gen1 - gen0, drafted1 - drafted0, accepted1 - accepted0, nrow, nb > 0,
                 sd_time_ms() - t0);
    pthread_mutex_unlock(&b->mu);
    return rc ? rc : rc_start;
}
