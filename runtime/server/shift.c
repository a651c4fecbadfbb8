/*
 * runtime/server/shift.c: llama-server's --context-shift in serve. A choice whose
 * sequence fills its context (the batcher request ran with stop_at_context and ended with
 * SD_STOP_CONTEXT) while its n_predict is not reached goes on: the context (the segment's
 * window, then the tokens it emitted) keeps its first n_keep tokens and drops the older
 * half of the rest (sd_ctx_shift_window, generate's arithmetic), and the shortened window
 * is submitted as the next segment's prompt, with the budget left; the prefix cache gives
 * back what it still holds of it, the rest is evaluated afresh (generate re-rotates the
 * keys of its single-sequence cache instead: the batcher's paged sequences are not
 * shifted in place). The client sees one answer: text and tokens go on, the statistics
 * add up (prompt figures the first segment's), and the answer says it was truncated.
 * The text after a shift is a function of the window alone (greedy, and keyed sampling
 * for a seed), so it is the same with or without a draft.
 */
#include <stdlib.h>
#include <string.h>

#include "runtime/server/server_impl.h"

void srv_shift_merge(const srv_sub *sub, sd_gen_stats *st) {
    if (sub->n_shifts == 0) return;
    sd_gen_stats m = sub->acc;
    sd_stats_add(&m, st);
    /* the request's prompt is the first segment's; a shifted window is not a prompt */
    m.n_prompt = sub->acc.n_prompt;
    m.n_prompt_cached = sub->acc.n_prompt_cached;
    m.t_prefill_ms = sub->acc.t_prefill_ms;
    m.ttft_ms = sub->acc.ttft_ms;
    m.t_first_ms = sub->acc.t_first_ms;
    m.stop = st->stop;
    *st = m;
}

int srv_shift_take(srv_gen *g, srv_sub *sub, const sd_req_event *ev) {
    srv_choice *c = &g->ch[sub->base];
    const int32_t n_done = (int32_t)(c->toks_len / sizeof(int32_t)) + ev->n_tokens;
    const int32_t n_ctx = sd_batcher_n_ctx(g->srv->b);
    /* nothing left to make, or kept tokens that leave no room (as generate) */
    if (n_done >= sub->n_total || sub->n_keep >= n_ctx / 2) return 0;
    sd_gen_stats st = *ev->stats;
    srv_shift_merge(sub, &st);
    sub->acc = st;
    sub->n_shifts++;
    c->ctx_limited = 1; /* llama-server's "truncated" */
    sub->shift_next = g->srv->shift_q;
    g->srv->shift_q = sub;
    return 1;
}

/* End sub's choice at the full context (its next segment could not start). */
static void end_at_context(srv_sub *sub) {
    sd_gen_stats zero;
    memset(&zero, 0, sizeof zero);
    zero.stop = SD_STOP_CONTEXT;
    sd_req_event ev;
    memset(&ev, 0, sizeof ev);
    ev.id = sub->id;
    ev.done = 1;
    ev.stop = SD_STOP_CONTEXT;
    ev.stats = &zero;
    sub->no_shift = 1;
    sub->cb(sub, &ev);
}

/* The next segment of sub: its window shifted, submitted. SD_OK or the error. */
static int next_segment(sd_server *s, srv_sub *sub, sd_error *err) {
    srv_gen *g = sub->g;
    pthread_mutex_lock(&g->mu);
    const srv_choice *c = &g->ch[sub->base];
    const int cancelled = g->cancelled;
    const int32_t n_seg = (int32_t)((c->toks_len - sub->toks0) / sizeof(int32_t));
    const int32_t n_done = (int32_t)(c->toks_len / sizeof(int32_t));
    int32_t *win = cancelled ? NULL : realloc(sub->win, ((size_t)sub->n_win + n_seg) * sizeof *win);
    if (win) {
        memcpy(win + sub->n_win, c->toks + sub->toks0, (size_t)n_seg * sizeof *win);
        sub->win = win;
        const int32_t n_cur = sub->n_win + n_seg;
        sub->n_win = n_cur - sd_ctx_shift_window(win, n_cur, sub->n_keep);
        sub->toks0 = c->toks_len;
    }
    pthread_mutex_unlock(&g->mu);
    if (cancelled) return sd_errorf(err, SD_ERR_ARG, "cancelled");
    if (!win) return sd_errorf(err, SD_ERR_OOM, "context shift: out of memory");
    sd_request req;
    memset(&req, 0, sizeof req);
    req.prompt = sub->win;
    req.n_prompt = sub->n_win;
    req.gen = sub->gp;
    req.gen.n_predict = sub->n_total - n_done;
    req.stop = (const char *const *)g->stop;
    req.n_stop = g->n_stop;
    req.n_choices = 1;
    req.cb = sub->cb;
    req.user = sub;
    req.stop_at_context = 1;
    int64_t id = 0;
    const int rc = sd_batcher_submit(s->b, &req, &id, err);
    if (rc) return rc;
    pthread_mutex_lock(&g->mu);
    sub->id = id;
    pthread_mutex_unlock(&g->mu);
    return SD_OK;
}

void srv_shift_serve(sd_server *s) {
    while (s->shift_q) {
        srv_sub *sub = s->shift_q;
        s->shift_q = sub->shift_next;
        sub->shift_next = NULL;
        sd_error err = {0};
        if (next_segment(s, sub, &err) != SD_OK) end_at_context(sub);
    }
}
