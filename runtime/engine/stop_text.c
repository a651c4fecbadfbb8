/*
 * runtime/engine/stop_text.c: stop strings over a sequence's streamed text, for both
 * clients of the engine (see sd_engine.h): the search and the hold-back the batcher's
 * choices use (batch_out.c), and sd_stop_text, the same over one generation's tokens
 * (sd_engine_generate_text: specdec generate's --stop / -r, sd_complete's stop strings).
 */
#include <stdlib.h>
#include <string.h>

#include "runtime/engine/engine_impl.h"

size_t sd_stop_find(const char *text, size_t len, size_t from, const char *const *stop,
                    const size_t *stop_len, int32_t n_stop) {
    size_t best = SD_STOP_NOT_FOUND;
    for (int32_t i = 0; i < n_stop; i++) {
        if (len < stop_len[i]) continue;
        for (size_t p = from; p + stop_len[i] <= len && p < best; p++)
            if (memcmp(text + p, stop[i], stop_len[i]) == 0) {
                best = p;
                break;
            }
    }
    return best;
}

size_t sd_stop_holdback(const char *text, size_t len, size_t sent, const char *const *stop,
                        const size_t *stop_len, int32_t n_stop) {
    const size_t avail = len - sent;
    size_t keep = 0;
    for (int32_t i = 0; i < n_stop; i++) {
        const size_t max = stop_len[i] - 1 < avail ? stop_len[i] - 1 : avail;
        for (size_t m = max; m > keep; m--)
            if (memcmp(text + len - m, stop[i], m) == 0) {
                keep = m;
                break;
            }
    }
    return keep;
}

struct sd_stop_text {
    sd_detok *dt;
    char *stop[SD_MAX_STOP_STRINGS];
    size_t stop_len[SD_MAX_STOP_STRINGS];
    int32_t n_stop;
    char *text; /* the text so far [len], cut at a stop string; given up to sent */
    size_t len, cap, sent;
    int hit;        /* a stop string was found (the text ends before it) */
    int rc;         /* a failure inside the token callback (SD_OK: none) */
    sd_error error; /* ... its record */
    sd_text_cb cb;
    void *user;
};

void sd_stop_text_free(sd_stop_text *s) {
    if (!s) return;
    sd_detok_free(s->dt);
    for (int32_t i = 0; i < s->n_stop; i++)
        free(s->stop[i]);
    free(s->text);
    free(s);
}

int sd_stop_text_init(const sd_vocab *v, const char *const *stop, int32_t n_stop,
                      unsigned detok_flags, sd_text_cb cb, void *user, sd_stop_text **out,
                      sd_error *err) {
    *out = NULL;
    if (n_stop < 0 || n_stop > SD_MAX_STOP_STRINGS || (n_stop > 0 && !stop))
        return sd_errorf(err, SD_ERR_ARG, "stop strings: %d, expected 0 .. %d", (int)n_stop,
                         SD_MAX_STOP_STRINGS);
    for (int32_t i = 0; i < n_stop; i++)
        if (!stop[i] || !stop[i][0])
            return sd_errorf(err, SD_ERR_ARG, "stop string %d is empty", (int)i);
    sd_stop_text *s = calloc(1, sizeof *s);
    if (!s) return sd_errorf(err, SD_ERR_OOM, "stop strings: out of memory");
    s->cb = cb;
    s->user = user;
    int rc = sd_detok_init(v, detok_flags, &s->dt, err);
    for (int32_t i = 0; i < n_stop && !rc; i++) {
        s->stop_len[i] = strlen(stop[i]);
        s->stop[i] = malloc(s->stop_len[i] + 1);
        if (!s->stop[i]) {
            rc = sd_errorf(err, SD_ERR_OOM, "stop strings: out of memory");
            break;
        }
        memcpy(s->stop[i], stop[i], s->stop_len[i] + 1);
        s->n_stop = i + 1;
    }
    if (rc) {
        sd_stop_text_free(s);
        return rc;
    }
    *out = s;
    return SD_OK;
}

const char *sd_stop_text_get(const sd_stop_text *s, size_t *len) {
    *len = s->len;
    return s->text ? s->text : "";
}

int sd_stop_text_status(const sd_stop_text *s, sd_error *err) {
    if (s->rc && err) *err = s->error;
    return s->rc;
}

int sd_stop_text_hit(const sd_stop_text *s) {
    return s->hit;
}

/* Cut the text at the earliest stop string in text[from, len) (1: found). */
static int cut(sd_stop_text *s, size_t from) {
    if (s->n_stop == 0) return 0;
    const size_t p =
        sd_stop_find(s->text, s->len, from, (const char *const *)s->stop, s->stop_len, s->n_stop);
    if (p == SD_STOP_NOT_FOUND) return 0;
    s->len = p;
    s->text[p] = '\0';
    return s->hit = 1;
}

/* Give the callback the tokens and the text that became final (all of it when final). */
static int give(sd_stop_text *s, const int32_t *tokens, int32_t n, int final) {
    const size_t end = final || s->hit ? s->len
                                       : s->len - sd_stop_holdback(s->text, s->len, s->sent,
                                                                   (const char *const *)s->stop,
                                                                   s->stop_len, s->n_stop);
    const char *t = s->text ? s->text + s->sent : "";
    const size_t len = end > s->sent ? end - s->sent : 0;
    if (end > s->sent) s->sent = end;
    if (!s->cb || (n == 0 && len == 0)) return 0;
    return s->cb(s->user, tokens, n, t, len);
}

int sd_stop_text_tokens(void *user, const int32_t *tokens, int32_t n) {
    sd_stop_text *s = user;
    const size_t from = s->sent;
    for (int32_t i = 0; i < n && !s->hit; i++) {
        const char *piece = NULL;
        size_t len = 0;
        int rc = sd_detok_push(s->dt, tokens[i], &piece, &len, &s->error);
        if (!rc && len && sd_buf_append(&s->text, &s->len, &s->cap, piece, len))
            rc = sd_errorf(&s->error, SD_ERR_OOM, "generate: out of memory for the text");
        if (rc) {
            s->rc = rc;
            return 1;
        }
    }
    cut(s, from);
    const int stop = give(s, tokens, n, 0);
    return s->hit || stop;
}

int sd_stop_text_finish(sd_stop_text *s, sd_gen_stats *st) {
    if (!s->hit) {
        const char *tail = NULL;
        size_t len = 0;
        const size_t from = s->sent;
        sd_detok_flush(s->dt, &tail, &len);
        if (len && sd_buf_append(&s->text, &s->len, &s->cap, tail, len)) {
            s->rc = sd_errorf(&s->error, SD_ERR_OOM, "generate: out of memory for the text");
            return 0;
        }
        cut(s, from);
    }
    if (s->hit && st) st->stop = SD_STOP_STRING;
    return give(s, NULL, 0, 1);
}
