/* runtime/engine/batch_out.c: a batcher choice's output once its tokens are committed
 * (stop ids and the budget: step.c): streaming detokenization, stop strings (held back
 * while they may still match), events. */
#include <stdlib.h>
#include <string.h>

#include "runtime/engine/batcher_impl.h"

static int text_append(sd_choice *c, const char *s, size_t n) {
    if (n == 0) return 0;
    return sd_buf_append(&c->text, &c->text_len, &c->text_cap, s, n);
}

/* The earliest stop string in text[from, text_len) (sd_stop_find): cut the text there.
 * 1 if found. */
static int cut_at_stop(sd_choice *c, size_t from) {
    const sd_req *r = c->r;
    const size_t p = sd_stop_find(c->text, c->text_len, from, (const char *const *)r->stop,
                                  r->stop_len, r->n_stop);
    if (p == SD_STOP_NOT_FOUND) return 0;
    c->text_len = p;
    c->text[p] = '\0';
    return 1;
}

/* Bytes at the end of the unsent text that may be the start of a stop string. */
static size_t holdback(const sd_choice *c) {
    const sd_req *r = c->r;
    return sd_stop_holdback(c->text, c->text_len, c->text_sent, (const char *const *)r->stop,
                            r->stop_len, r->n_stop);
}

void sd_choice_text(sd_batcher *b, sd_choice *c, int32_t first_new) {
    (void)b;
    const size_t from = c->text_sent;
    c->stop = c->st.stop; /* the commit's (step.c): a stop id or the budget */
    for (int32_t i = first_new; i < c->n_ctx; i++) {
        const char *piece = NULL;
        size_t len = 0;
        if (sd_detok_push(c->detok, c->ctx[i], &piece, &len, NULL) != SD_OK ||
            text_append(c, piece, len) != 0) {
            c->failed = 1; /* out of memory for the text: the step ends the choice */
            break;
        }
    }
    if (c->r->n_stop && cut_at_stop(c, from)) c->stop = SD_STOP_STRING;
    if (!c->first_done && c->st.n_generated > 0) {
        c->first_done = 1;
        c->st.t_first_ms = sd_time_ms() - c->r->t_submit;
        c->st.ttft_ms = c->st.t_first_ms;
    }
}

int sd_choice_event(sd_batcher *b, sd_choice *c) {
    (void)b;
    const int done = c->state == CH_DONE;
    const size_t end = done ? c->text_len : c->text_len - holdback(c);
    sd_req_event ev;
    memset(&ev, 0, sizeof ev);
    ev.id = c->r->id;
    ev.index = c->index;
    ev.tokens = c->ctx + c->n_emitted_sent;
    ev.n_tokens = c->n_ctx - c->n_emitted_sent;
    ev.logprobs = c->lp ? c->lp + c->out0 + (c->n_emitted_sent - c->r->n_prompt) : NULL;
    ev.text = c->text ? c->text + c->text_sent : "";
    ev.len = end > c->text_sent ? end - c->text_sent : 0;
    ev.done = done;
    ev.stop = c->stop;
    ev.stats = &c->st;
    ev.n_ctx_shifts = c->n_shifts;
    if (!done && ev.n_tokens == 0 && ev.len == 0) return 0;
    c->n_emitted_sent = c->n_ctx;
    if (end > c->text_sent) c->text_sent = end;
    return c->r->cb ? c->r->cb(c->r->user, &ev) : 0;
}

int sd_choice_progress(sd_batcher *b, sd_choice *c, int32_t n_processed) {
    (void)b;
    sd_req_event ev;
    memset(&ev, 0, sizeof ev);
    ev.id = c->r->id;
    ev.index = c->index;
    ev.text = "";
    ev.stop = SD_STOP_NONE;
    ev.stats = &c->st;
    ev.progress = 1;
    ev.n_processed = n_processed;
    return c->r->cb ? c->r->cb(c->r->user, &ev) : 0;
}

void sd_choice_finish(sd_batcher *b, sd_choice *c, sd_stop_reason stop) {
    if (c->state == CH_DONE) return;
    if (c->stop == SD_STOP_NONE) c->stop = stop;
    const char *tail = NULL;
    size_t len = 0;
    sd_detok_flush(c->detok, &tail, &len);
    if (c->stop != SD_STOP_STRING) {
        const size_t from = c->text_sent;
        text_append(c, tail, len);
        if (c->r->n_stop && cut_at_stop(c, from)) c->stop = SD_STOP_STRING;
    }
    c->st.stop = c->stop;
    c->st.t_total_ms = sd_time_ms() - c->r->t_submit;
    /* Its prompt and output for later requests' suffix drafts (a failed add, out of
     * memory, only leaves it out). */
    if (b->suffix_cache && c->stop != SD_STOP_NONE && c->n_ctx > 0)
        sd_suffix_cache_add(b->suffix_cache, c->ctx, c->n_ctx, NULL);
    /* Store the prompt and output blocks for later prompts, unless the pass failed. */
    sd_batcher_release(b, c, c->stop != SD_STOP_NONE);
    c->state = CH_DONE;
    c->r->n_done++;
    sd_choice_event(b, c); /* its return value: the request is over anyway */
}
