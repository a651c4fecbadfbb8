/*
 * The interactive chat (see chat_loop.h). One conversation: the messages so far, the tokens
 * the models have been given (every turn's formatted prompt and answer, in order) and the
 * formatted text those tokens stand for.
 *
 * A turn appends only what is new. The template renders the whole conversation with the new
 * user message and the assistant header; when that text starts with the text already given
 * (the previous prompt and its answer as generated), only the rest - the end of the last
 * answer's turn, the user message, the header - is tokenized and appended, so the tokens of
 * earlier turns stay exactly as the model produced them and the engine's KV caches keep
 * them (the one-slot batcher's prefix cache gives the next turn the blocks of the last
 * one), and only the new
 * tokens are evaluated. A template that renders earlier turns differently (one
 * that trims an answer, say) is re-tokenized whole; the caches then keep the common prefix.
 */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools/chat_loop.h"
#include "tools/tools.h"
#include "runtime/tokenizer/sd_vocab.h"

/* A growable byte string (NUL-terminated when not empty). */
typedef struct text_buf {
    char *p;
    size_t n, cap;
    int oom;
} text_buf;

static void text_add(text_buf *b, const char *s, size_t n) {
    if (b->oom || !n) return;
    if (sd_buf_append(&b->p, &b->n, &b->cap, s, n)) b->oom = 1;
}

typedef struct conversation {
    sd_chat_msg *msgs; /* contents owned */
    size_t n_msgs, cap_msgs;
    int32_t *toks; /* [cap_toks]: what the models were given, in order */
    int32_t n_toks, cap_toks;
    text_buf seen; /* the formatted text toks stand for */
} conversation;

static void conversation_free(conversation *v) {
    for (size_t i = 0; i < v->n_msgs; i++)
        free((char *)v->msgs[i].content);
    free(v->msgs);
    free(v->seen.p);
}

static int add_msg(conversation *v, const char *role, const char *content, size_t len,
                   sd_error *err) {
    if (v->n_msgs == v->cap_msgs) {
        size_t cap = v->cap_msgs ? 2 * v->cap_msgs : 16;
        sd_chat_msg *m = realloc(v->msgs, cap * sizeof *m);
        if (!m) return sd_errorf(err, SD_ERR_OOM, "chat: out of memory");
        v->msgs = m;
        v->cap_msgs = cap;
    }
    char *c = malloc(len + 1);
    if (!c) return sd_errorf(err, SD_ERR_OOM, "chat: out of memory");
    memcpy(c, content, len);
    c[len] = '\0';
    v->msgs[v->n_msgs++] = (sd_chat_msg){role, c};
    return SD_OK;
}

static int add_toks(conversation *v, const int32_t *t, size_t n, sd_error *err) {
    if (n > (size_t)(INT32_MAX - v->n_toks))
        return sd_errorf(err, SD_ERR_CONTEXT, "chat: conversation too long");
    if (v->n_toks + (int32_t)n > v->cap_toks) {
        int32_t cap = v->cap_toks ? v->cap_toks : 1024;
        while (cap < v->n_toks + (int32_t)n)
            cap = cap > INT32_MAX / 2 ? INT32_MAX : cap * 2;
        int32_t *p = realloc(v->toks, (size_t)cap * sizeof *p);
        if (!p) return sd_errorf(err, SD_ERR_OOM, "chat: out of memory");
        v->toks = p;
        v->cap_toks = cap;
    }
    if (n) memcpy(v->toks + v->n_toks, t, n * sizeof *t);
    v->n_toks += (int32_t)n;
    return SD_OK;
}

/*
 * The user's message into the conversation: its tokens appended (only the new part when the
 * rendering continues the text given so far) and *n_cached set to the tokens whose KV
 * entries the models still hold (all but the last one given, of the common prefix).
 */
static int add_user_turn(const sd_cli_chat *c, conversation *v, const char *msg, size_t len,
                         int32_t *n_cached, sd_error *err) {
    int rc = add_msg(v, "user", msg, len, err);
    char *text = NULL;
    size_t tl = 0;
    if (!rc) {
        rc = sd_chat_apply(c->tmpl, v->msgs, v->n_msgs, 1, &text, &tl, err);
        if (rc && c->tmpl_origin) sd_error_prefix(err, rc, "%s", c->tmpl_origin);
    }
    if (rc) return rc;
    const size_t sl = v->seen.n;
    const int cont = v->n_toks > 0 && tl >= sl && !memcmp(text, v->seen.p, sl);
    const size_t skip = cont ? sl : 0;
    unsigned flags = SD_VOCAB_PARSE_SPECIAL;
    if (!cont && c->add_bos) flags |= SD_VOCAB_ADD_SPECIAL;
    int32_t *ids = NULL;
    size_t n = 0;
    rc =
        sd_vocab_tokenize(sd_engine_vocab(c->engine), text + skip, tl - skip, flags, &ids, &n, err);
    const int32_t n_old = v->n_toks;
    if (!rc && cont) {
        *n_cached = n_old - 1;
        rc = add_toks(v, ids, n, err);
    } else if (!rc) {
        /* re-tokenized whole: the caches keep the prefix both tokenizations share */
        int32_t common = 0;
        while (common < n_old && (size_t)common < n && v->toks[common] == ids[common])
            common++;
        *n_cached = common < n_old - 1 ? common : (n_old > 0 ? n_old - 1 : 0);
        v->n_toks = 0;
        rc = add_toks(v, ids, n, err);
    }
    free(ids);
    v->seen.n = 0;
    if (!rc) text_add(&v->seen, text, tl);
    free(text);
    if (!rc && v->seen.oom) rc = sd_errorf(err, SD_ERR_OOM, "chat: out of memory");
    return rc;
}

/* The answer as it streams: stdout, and its text for the next turn's rendering. */
typedef struct answer {
    sd_detok *dt;
    text_buf text;
    int write_err; /* errno of a failed write to stdout */
    int stopped;   /* Ctrl-C */
} answer;

static void answer_write(answer *a, const char *s, size_t n) {
    if (!n) return;
    text_add(&a->text, s, n);
    errno = 0;
    if (!a->write_err && (fwrite(s, 1, n, stdout) != n || fflush(stdout) != 0))
        a->write_err = errno ? errno : EIO;
}

static int on_tokens(void *user, const int32_t *toks, int32_t n) {
    answer *a = user;
    for (int32_t i = 0; i < n; i++) {
        const char *s = NULL;
        size_t l = 0;
        if (sd_detok_push(a->dt, toks[i], &s, &l, NULL) == SD_OK) answer_write(a, s, l);
    }
    if (sd_cli_interrupted()) a->stopped = 1;
    return a->write_err || a->stopped || a->text.oom;
}

static void print_turn_stats(int turn, const sd_gen_stats *st, int32_t n_new, int32_t n_cached,
                             int stopped, int with_draft) {
    fprintf(stderr,
            "[turn %d: %d tokens, stop: %s; prompt %d tokens: %d new, %d from the KV cache; "
            "prefill %.1f ms, TTFT %.1f ms, %.2f tokens/s, %.2f tokens/pass",
            turn, st->n_generated, stopped ? "interrupted" : sd_stop_reason_str(st->stop),
            st->n_prompt, n_new, n_cached, st->t_prefill_ms, st->ttft_ms, sd_stats_tokens_per_s(st),
            sd_stats_tokens_per_pass(st));
    if (with_draft)
        fprintf(stderr, ", acceptance %.3f (%d of %d drafted)", sd_stats_acceptance_rate(st),
                st->n_accepted, st->n_drafted);
    fprintf(stderr, "]\n");
}

/* --context-shift: the conversation keeps its first c->keep tokens and drops the older half
 * of the rest; the target's cache drops the same run with its later keys re-rotated, so
 * the next answer re-reads none of the kept conversation: the cached conversation is
 * shifted in the one-slot batcher's prefix cache (sd_engine_shift_cached). Where it
 * cannot (nothing cached, a device, tensor-parallel ranks) the next answer evaluates the
 * shortened conversation. */
static int shift_conversation(const sd_cli_chat *c, conversation *v, sd_error *err) {
    const int32_t n_keep = c->keep < v->n_toks / 2 ? c->keep : 0;
    const int32_t n_discard = (v->n_toks - n_keep) / 2;
    if (n_discard < 1)
        return sd_errorf(err, SD_ERR_CONTEXT, "chat: --context-shift: nothing left to drop");
    int32_t n_shifted = 0;
    const int rc =
        sd_engine_shift_cached(c->engine, v->toks, v->n_toks, n_keep, n_discard, &n_shifted, err);
    if (rc) return rc;
    const int shifted = n_shifted > 0;
    memmove(v->toks + n_keep, v->toks + n_keep + n_discard,
            (size_t)(v->n_toks - n_keep - n_discard) * sizeof *v->toks);
    v->n_toks -= n_discard;
    if (c->notes)
        fprintf(stderr, "[context shift: kept %d, dropped %d, %d in context (%s)]\n", n_keep,
                n_discard, v->n_toks, shifted ? "keys re-rotated" : "recomputed");
    return SD_OK;
}

/* One answer to the conversation so far, appended to it. */
static int answer_turn(const sd_cli_chat *c, conversation *v, int turn, int32_t n_cached,
                       sd_error *err) {
    sd_engine *e = c->engine;
    const int32_t n_ctx = sd_engine_n_ctx(e);
    /* with --context-shift, room for an answer of a quarter of the context at least */
    while (c->context_shift && v->n_toks > n_ctx - n_ctx / 4) {
        const int rc = shift_conversation(c, v, err);
        if (rc) return rc;
        n_cached = 0; /* the prefix cache's hit is counted below */
    }
    if (v->n_toks >= n_ctx)
        return sd_errorf(err, SD_ERR_CONTEXT,
                         "chat: the conversation is %d tokens, the context holds %d (n_ctx): "
                         "no room for another answer%s",
                         v->n_toks, n_ctx, c->context_shift ? "" : " (see --context-shift)");
    sd_gen_params g = c->gen;
    /* the answer's most tokens: max_tokens, else (shifting) n_ctx, else the room left */
    const int32_t cap = c->max_tokens > 0  ? c->max_tokens
                        : c->context_shift ? n_ctx
                                           : n_ctx - v->n_toks + 2;
    g.k_trace = NULL;
    g.k_trace_cap = 0;
    answer a = {0};
    int32_t *out = malloc((size_t)cap * sizeof *out);
    int rc = out ? sd_detok_init(sd_engine_vocab(e), 0, &a.dt, err)
                 : sd_errorf(err, SD_ERR_OOM, "chat: out of memory");
    sd_gen_stats st;
    memset(&st, 0, sizeof st);
    const int32_t n_prompt = v->n_toks;
    int32_t total = 0;
    for (int seg = 0; !rc; seg++) {
        /* at most n_ctx - n + 1 tokens can be emitted; one more makes the stop "context" */
        const int32_t room = n_ctx - v->n_toks + 2;
        g.n_predict = cap - total < room ? cap - total : room;
        sd_gen_stats b;
        memset(&b, 0, sizeof b);
        rc = sd_engine_generate(e, &g, v->toks, v->n_toks, on_tokens, &a, out + total, g.n_predict,
                                &b, err);
        if (seg == 0) {
            st = b;
            /* the positions the prefix cache gave the answer's prompt */
            if (!rc) n_cached = b.n_prompt_cached;
        } else { /* the counts of every segment; the times of the first */
            st.n_generated += b.n_generated;
            st.n_drafted += b.n_drafted;
            st.n_accepted += b.n_accepted;
            st.stop = b.stop;
        }
        /* the answer so far is part of the conversation (the next segment continues it) */
        if (!rc) rc = add_toks(v, out + total, (size_t)b.n_generated, err);
        total += b.n_generated;
        if (rc || !c->context_shift || b.stop != SD_STOP_CONTEXT || total >= cap || a.stopped ||
            a.write_err)
            break;
        rc = shift_conversation(c, v, err);
    }
    if (a.dt) {
        const char *s = NULL;
        size_t l = 0;
        sd_detok_flush(a.dt, &s, &l);
        answer_write(&a, s, l);
        sd_detok_free(a.dt);
    }
    errno = 0; /* the newline after the answer (not part of its text) */
    if (!a.write_err && (fputc('\n', stdout) == EOF || fflush(stdout) != 0))
        a.write_err = errno ? errno : EIO;
    if (!rc && a.write_err)
        rc = sd_errorf(err, SD_ERR_IO, "stdout: write error: %s", strerror(a.write_err));
    if (!rc && a.text.oom) rc = sd_errorf(err, SD_ERR_OOM, "chat: out of memory");
    if (!rc) rc = add_msg(v, "assistant", a.text.p ? a.text.p : "", a.text.n, err);
    if (!rc) text_add(&v->seen, a.text.p ? a.text.p : "", a.text.n);
    if (!rc && c->notes)
        print_turn_stats(turn, &st, n_prompt - n_cached, n_cached, a.stopped,
                         g.n_draft > 0 && sd_engine_has_proposer(e, g.draft_type));
    if (!rc && c->turn_done)
        c->turn_done(c->turn_user, turn, n_prompt, st.n_generated, n_cached, v->toks, v->n_toks);
    if (a.stopped) sd_cli_interrupt_clear(); /* that answer is over; the chat goes on */
    free(a.text.p);
    free(out);
    return rc;
}

/* Wait until in can be read: 1, or -1 when Ctrl-C came first (or comes while waiting).
 * SIGINT is blocked from the flag's test to ppoll, which unblocks it atomically, so a
 * Ctrl-C between them cannot be missed. A stream without a descriptor (fmemopen): 1. */
static int wait_input(FILE *in) {
    const int fd = fileno(in);
    if (fd < 0) return 1;
    sigset_t block, old;
    sigemptyset(&block);
    sigaddset(&block, SIGINT);
    if (sigprocmask(SIG_BLOCK, &block, &old) != 0) return 1;
    int r = 1;
    for (;;) {
        if (sd_cli_interrupted()) {
            r = -1;
            break;
        }
        struct pollfd p = {fd, POLLIN, 0};
        const int n = ppoll(&p, 1, NULL, &old);
        if (n > 0 || (n < 0 && errno != EINTR)) break; /* readable, or getline reports it */
    }
    sigprocmask(SIG_SETMASK, &old, NULL);
    return r;
}

/* The next user message into *msg: 1, or 0 at the end (end of input, "/exit", "/quit"), or
 * -1 when Ctrl-C interrupted the read. A line ending in '\' continues on the next one. */
static int read_turn(const sd_cli_chat *c, char **line, size_t *cap, text_buf *msg) {
    msg->n = 0;
    for (int more = 1; more;) {
        if (c->prompt) {
            fputs(msg->n ? ". " : "> ", stdout);
            fflush(stdout);
        }
        if (wait_input(c->in) < 0) {
            if (c->prompt) fputc('\n', stdout);
            return -1;
        }
        errno = 0;
        ssize_t n = getline(line, cap, c->in);
        if (n < 0) {
            clearerr(c->in);
            if (c->prompt) fputc('\n', stdout);
            return msg->n ? 1 : 0;
        }
        while (n > 0 && ((*line)[n - 1] == '\n' || (*line)[n - 1] == '\r'))
            n--;
        more = n > 0 && (*line)[n - 1] == '\\';
        text_add(msg, *line, (size_t)(n - more));
        if (more) text_add(msg, "\n", 1);
        if (!more && msg->n == 0) more = 1; /* an empty line: ask again */
    }
    if (msg->p && (!strcmp(msg->p, "/exit") || !strcmp(msg->p, "/quit"))) return 0;
    return 1;
}

int sd_cli_chat_run(const sd_cli_chat *c, int32_t **conv_out, int32_t *n_conv, int *by_interrupt,
                    sd_error *err) {
    conversation v;
    memset(&v, 0, sizeof v);
    *conv_out = NULL;
    *n_conv = 0;
    *by_interrupt = 0;
    int rc = c->system ? add_msg(&v, "system", c->system, strlen(c->system), err) : SD_OK;
    char *line = NULL;
    size_t cap = 0;
    text_buf msg = {0};
    /* Unbuffered: what poll says is readable is all there is (a buffer could hold lines
     * poll does not see). Must come before the first read of the stream. */
    if (fileno(c->in) >= 0) setvbuf(c->in, NULL, _IONBF, 0);
    for (int turn = 1; !rc; turn++) {
        if (turn == 1 && c->first) {
            msg.n = 0;
            text_add(&msg, c->first, strlen(c->first));
            if (c->echo_first) printf("> %s\n", c->first);
        } else {
            const int r = read_turn(c, &line, &cap, &msg);
            if (r <= 0) {
                *by_interrupt = r < 0;
                break;
            }
            if (c->escape && msg.p) msg.n = sd_cli_unescape(msg.p, msg.n);
        }
        if (msg.oom) {
            rc = sd_errorf(err, SD_ERR_OOM, "chat: out of memory");
            break;
        }
        int32_t n_cached = 0;
        rc = add_user_turn(c, &v, msg.p ? msg.p : "", msg.n, &n_cached, err);
        if (!rc) rc = answer_turn(c, &v, turn, n_cached, err);
    }
    free(line);
    free(msg.p);
    *conv_out = v.toks;
    *n_conv = v.n_toks;
    conversation_free(&v);
    return rc;
}
