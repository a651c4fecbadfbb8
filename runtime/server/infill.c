/* runtime/server/infill.c: POST /infill, llama-server's fill-in-the-middle request.
 *
 * The body is /completion's with the prompt split in three: input_prefix (the code before
 * the cursor), input_suffix (after it), prompt (typed at the cursor, optional) and
 * input_extra, other files' chunks [{"filename": string (optional), "text": string}]. The
 * prompt fed to the model, in the repository-level FIM layout (FIM tokens of the
 * vocabulary; REP and SEP only where it has them):
 *
 *   [REP] myproject\n  ([SEP] filename\n text)...  [SEP] filename\n
 *   [BOS] [PRE] prefix prompt [SUF] suffix [MID]
 *
 * Budgets: the prefix keeps its last 3/4 of a batch (-b), the suffix its first
 * batch/4 - 2 - prompt tokens, the extra chunks (a vocabulary without SEP separates them
 * with a "--- snippet ---" line) their last n_ctx - batch - 2 x the server's -n tokens (-n
 * -1: n_ctx - batch). The ids then go to POST /completion's path as a token prompt, so the
 * answer has its shape. A vocabulary without PRE, SUF and MID answers 501
 * not_supported_error; malformed fields 400.
 */
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/server/server_impl.h"
#include "runtime/tokenizer/sd_vocab.h"

/* A growing list of token ids. */
typedef struct ids {
    int32_t *v;
    size_t n, cap;
    int oom;
} ids;

static void push(ids *a, const int32_t *v, size_t n) {
    if (a->oom || n == 0) return;
    if (a->n + n > a->cap) {
        size_t cap = a->cap ? a->cap : 64;
        while (cap < a->n + n)
            cap *= 2;
        int32_t *p = realloc(a->v, cap * sizeof *p);
        if (!p) {
            a->oom = 1;
            return;
        }
        a->v = p;
        a->cap = cap;
    }
    memcpy(a->v + a->n, v, n * sizeof *v);
    a->n += n;
}

/* The last n ids of src (no pointer arithmetic on an empty list's NULL). */
static void push_last(ids *a, const ids *src, size_t n) {
    if (n > 0) push(a, src->v + (src->n - n), n);
}

static void push1(ids *a, int32_t id) {
    push(a, &id, 1);
}

/* Text's tokens (no BOS; control-token texts parsed only with special). */
static int push_text(ids *a, const sd_vocab *v, const char *text, size_t len, int special) {
    int32_t *t = NULL;
    size_t n = 0;
    sd_error err = {0};
    if (sd_vocab_tokenize(v, text, len, special ? SD_VOCAB_PARSE_SPECIAL : 0, &t, &n, &err)) {
        a->oom = 1;
        return -1;
    }
    push(a, t, n);
    free(t);
    return a->oom ? -1 : 0;
}

/* input_prefix / input_suffix: a string, or llama-server's mixed list of token ids and
 * strings. 1 when the field is malformed (r filled), -1 out of memory. */
static int push_mixed(ids *a, const sd_vocab *v, json_t *f, const char *name, srv_reply *r) {
    if (json_is_string(f)) return push_text(a, v, json_string_value(f), json_string_length(f), 0);
    const int32_t nv = sd_vocab_n_tokens(v);
    size_t k;
    json_t *e;
    if (!json_is_array(f)) goto bad;
    json_array_foreach(f, k, e) {
        if (json_is_string(e)) {
            if (push_text(a, v, json_string_value(e), json_string_length(e), 0)) return -1;
        } else if (json_is_integer(e) && json_integer_value(e) >= 0 && json_integer_value(e) < nv) {
            push1(a, (int32_t)json_integer_value(e));
        } else {
            goto bad;
        }
    }
    return a->oom ? -1 : 0;
bad:
    srv_error(r, 400, "invalid_request_error", name,
              "\"%s\" must be a string or a list of token ids (0 .. %d) and strings", name, nv - 1);
    return 1;
}

static int64_t min64(int64_t a, int64_t b) {
    return a < b ? a : b;
}

static int64_t max64(int64_t a, int64_t b) {
    return a > b ? a : b;
}

void srv_infill(sd_server *s, const char *body, size_t len, struct MHD_Connection *c, int fd,
                srv_reply *r) {
    const sd_vocab *v = sd_engine_vocab(s->e);
    const int32_t pre = sd_vocab_fim(v, SD_VOCAB_FIM_PRE), suf = sd_vocab_fim(v, SD_VOCAB_FIM_SUF),
                  mid = sd_vocab_fim(v, SD_VOCAB_FIM_MID), rep = sd_vocab_fim(v, SD_VOCAB_FIM_REP),
                  sep = sd_vocab_fim(v, SD_VOCAB_FIM_SEP);
    if (pre < 0 || suf < 0 || mid < 0) {
        srv_error(r, 501, "not_supported_error", NULL,
                  "infill is not supported by this model: its vocabulary lacks FIM token(s):%s%s%s",
                  pre < 0 ? " prefix" : "", suf < 0 ? " suffix" : "", mid < 0 ? " middle" : "");
        return;
    }
    json_error_t je;
    json_t *o = json_loadb(body, len, 0, &je);
    ids extra = {0}, prefix = {0}, suffix = {0}, prompt = {0}, all = {0};
    json_t *arr = NULL;
    char *nbody = NULL;
    if (!json_is_object(o)) {
        srv_error(r, 400, "invalid_request_error", NULL, "the body must be a JSON object");
        goto done;
    }
    json_t *jp = json_object_get(o, "prompt"), *jpre = json_object_get(o, "input_prefix"),
           *jsuf = json_object_get(o, "input_suffix"), *jx = json_object_get(o, "input_extra");
    if (jp && !json_is_string(jp)) {
        srv_error(r, 400, "invalid_request_error", "prompt", "\"prompt\" must be a string");
        goto done;
    }
    if (!jpre || !jsuf) {
        srv_error(r, 400, "invalid_request_error", jpre ? "input_suffix" : "input_prefix",
                  "\"%s\" is required", jpre ? "input_suffix" : "input_prefix");
        goto done;
    }
    if (jx && !json_is_array(jx)) {
        srv_error(r, 400, "invalid_request_error", "input_extra",
                  "\"input_extra\" must be an array of {\"filename\": string, \"text\": string}");
        goto done;
    }
    size_t k;
    json_t *e;
    json_array_foreach(jx, k, e) { /* every chunk checked before anything is tokenized */
        json_t *t = json_object_get(e, "text"), *fn = json_object_get(e, "filename");
        if (!json_is_string(t)) {
            srv_error(r, 400, "invalid_request_error", "input_extra",
                      "input_extra[%zu] must have a \"text\" string", k);
            goto done;
        }
        if (fn && !json_is_string(fn)) {
            srv_error(r, 400, "invalid_request_error", "input_extra",
                      "input_extra[%zu]'s \"filename\" must be a string", k);
            goto done;
        }
    }
    int rc;
    if ((rc = push_mixed(&prefix, v, jpre, "input_prefix", r)) > 0) goto done;
    if (rc < 0) goto oom;
    if ((rc = push_mixed(&suffix, v, jsuf, "input_suffix", r)) > 0) goto done;
    if (rc < 0) goto oom;
    if (jp && push_text(&prompt, v, json_string_value(jp), json_string_length(jp), 1)) goto oom;
    /* The other files: the repository's name, then each file's name and text. */
    if (rep >= 0) {
        push1(&extra, rep);
        if (push_text(&extra, v, "myproject\n", 10, 0)) goto oom;
    }
    json_array_foreach(jx, k, e) {
        json_t *fn = json_object_get(e, "filename"), *t = json_object_get(e, "text");
        if (sep >= 0) {
            push1(&extra, sep);
            const char *name = fn ? json_string_value(fn) : "tmp";
            const size_t nl = fn ? json_string_length(fn) : 3;
            if (push_text(&extra, v, name, nl, 0) || push_text(&extra, v, "\n", 1, 0)) goto oom;
        } else if (push_text(&extra, v, "\n\n--- snippet ---\n\n", 19, 0)) {
            goto oom;
        }
        if (push_text(&extra, v, json_string_value(t), json_string_length(t), 0)) goto oom;
    }
    if (sep >= 0) {
        push1(&extra, sep);
        if (push_text(&extra, v, "filename\n", 9, 0)) goto oom;
    }
    /* The budgets (see the top of the file). */
    const int64_t n_batch = s->p.n_batch > 0 ? s->p.n_batch : 512;
    const int64_t n_ctx = sd_batcher_n_ctx(s->b);
    const int64_t n_pred = s->p.gen.n_predict >= n_ctx ? 0 : max64(0, s->p.gen.n_predict);
    const int64_t take_pre = min64((int64_t)prefix.n, 3 * (n_batch / 4));
    const int64_t take_suf =
        min64((int64_t)suffix.n, max64(0, n_batch / 4 - (2 + (int64_t)prompt.n)));
    const int64_t take_extra = min64((int64_t)extra.n, max64(0, n_ctx - n_batch - 2 * n_pred));
    push_last(&all, &extra, (size_t)take_extra);
    if (sd_vocab_add_bos(v) && sd_vocab_bos(v) >= 0) push1(&all, sd_vocab_bos(v));
    push1(&all, pre);
    push_last(&all, &prefix, (size_t)take_pre);
    push(&all, prompt.v, prompt.n);
    push1(&all, suf);
    push(&all, suffix.v, (size_t)take_suf);
    push1(&all, mid);
    if (all.oom || !(arr = json_array())) goto oom;
    for (size_t i = 0; i < all.n; i++)
        if (json_array_append_new(arr, json_integer(all.v[i]))) goto oom;
    /* /completion's request with the ids as its prompt. */
    json_object_del(o, "input_prefix");
    json_object_del(o, "input_suffix");
    json_object_del(o, "input_extra");
    if (json_object_set_new(o, "prompt", arr)) {
        arr = NULL;
        goto oom;
    }
    arr = NULL;
    nbody = json_dumps(o, JSON_COMPACT);
    if (!nbody) goto oom;
    srv_generate(s, SRV_NATIVE, nbody, strlen(nbody), c, fd, r);
    goto done;
oom:
    srv_error(r, 500, "server_error", NULL, "out of memory");
done:
    free(nbody);
    json_decref(arr);
    json_decref(o);
    free(extra.v);
    free(prefix.v);
    free(suffix.v);
    free(prompt.v);
    free(all.v);
}
