/* runtime/server/slot_action.c: llama-server's POST /slots/N?action=erase|save|restore.
 *
 * Sequences are not bound to slots here: the batcher gives each request a free sequence
 * and keeps finished prompts in one prefix cache that every sequence reuses.
 *   - erase drops the prefix cache's idle blocks (every slot's cached prefixes, not only
 *     N's: the next request evaluates its whole prompt), answered with llama-server's
 *     shape {"id_slot", "n_erased": the positions dropped}.
 *   - save (with --slot-save-path) writes slot N's last sequence, the tokens the KV cache
 *     held when its request ended (the request's id_slot, or the least recently used slot
 *     for a request without one), to the file named by the body's "filename" in that
 *     folder: tokens only, no KV rows. {"id_slot", "filename", "n_saved", "n_written",
 *     "timings": {"save_ms"}}.
 *   - restore reads such a file, drops the prefix cache's idle blocks (as erase: the
 *     slot's state is replaced, and the slots share one cache) and evaluates the tokens
 *     into the prefix cache (a one-token request of the target alone), so the next request
 *     that shares a prefix with them reuses it. {"id_slot", "filename", "n_restored",
 *     "n_read", "timings": {"restore_ms"}}.
 * The file, llama-server's sequence-state layout as far as the tokens go (native byte
 * order): u32 magic 'ggsq' (0x67677371), u32 version 3, u32 payload words W, then the
 * payload: packed (u32 0xFFFFFFFF, u32 1, u32 n, n token ids: W = n + 3) or a plain list
 * (n = W ids, llama-server's older files), then specdec's trailer: "SDSQ", u32 1, u64 the
 * vocabulary's fingerprint (sd_draft_vocab_fingerprint), u32 n_vocab. Nothing else may
 * follow. A file name with a path separator or "..", a file that is missing, truncated,
 * of another layout or another vocabulary, or whose tokens do not fit a sequence is a 400
 * with one line, never more.
 * The cache belongs to the stepping thread: the HTTP thread asks (a ticket) and waits
 * until the run loop has served it between two steps.
 */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "draft/sd_draft.h"
#include "runtime/server/server_impl.h"

/* How long an erase waits for the stepping thread (a step is far shorter). */
#define SLOT_ERASE_WAIT_MS 10000.0
/* How long a restore waits for its tokens to be evaluated. */
#define SLOT_RESTORE_WAIT_MS 300000.0

#define SLOT_MAGIC          0x67677371u /* 'ggsq', llama.cpp's LLAMA_STATE_SEQ_MAGIC */
#define SLOT_VERSION        3u          /* its LLAMA_STATE_SEQ_VERSION */
#define SLOT_PACKED         0xFFFFFFFFu
#define SLOT_PACKED_VERSION 1u
#define SLOT_TRAILER_MAGIC  "SDSQ"
#define SLOT_TRAILER_BYTES  20

void srv_slot_serve(sd_server *s) {
    const long long asked = atomic_load(&s->erase_asked);
    if (asked == atomic_load(&s->erase_done)) return;
    sd_batcher_stats st;
    sd_batcher_get_stats(s->b, &st);
    const long long before = (long long)st.kv.n_cached_idle;
    sd_batcher_clear_cache(s->b);
    sd_batcher_get_stats(s->b, &st);
    const long long after = (long long)st.kv.n_cached_idle;
    atomic_store(&s->erase_n, (before - after) * (long long)st.kv.block_size);
    atomic_store(&s->erase_done, asked);
}

static int32_t n_slots(const sd_server *s) {
    return s->p.n_slots > 0 ? s->p.n_slots : 1;
}

void srv_slot_record(sd_server *s, const srv_gen *g, const sd_gen_stats *st) {
    const srv_choice *c = &g->ch[0];
    if (!g->prompt0 || st->stop == SD_STOP_CANCEL || st->stop == SD_STOP_NONE) return;
    const int32_t n_gen = (int32_t)(c->toks_len / sizeof(int32_t));
    /* the KV holds the prompt and the output but its last token, unless a stop token
     * (not emitted) followed it */
    int32_t n = g->n_prompt0 + n_gen - (st->n_stop_tokens ? 0 : 1);
    if (n < 0) n = 0;
    int32_t *t = malloc(((size_t)n + 1) * sizeof *t);
    if (!t) return; /* the slot keeps its earlier record */
    const int32_t np = n < g->n_prompt0 ? n : g->n_prompt0;
    memcpy(t, g->prompt0, (size_t)np * sizeof *t);
    if (n > np) memcpy(t + np, c->toks, (size_t)(n - np) * sizeof *t);
    pthread_mutex_lock(&s->slot_mu);
    int32_t k = g->id_slot;
    if (k < 0 || k >= n_slots(s)) { /* the least recently used slot */
        k = 0;
        for (int32_t i = 1; i < n_slots(s); i++)
            if (s->slot_rec[i].use < s->slot_rec[k].use) k = i;
    }
    free(s->slot_rec[k].toks);
    s->slot_rec[k].toks = t;
    s->slot_rec[k].n = n;
    s->slot_rec[k].use = ++s->slot_use;
    pthread_mutex_unlock(&s->slot_mu);
}

/* The body's "filename", checked: 1 .. 255 bytes, no '/', '\\', "..", control bytes.
 * NULL with r filled. */
static const char *file_name(json_t *o, srv_reply *r) {
    json_t *v = json_object_get(o, "filename");
    if (!json_is_string(v)) {
        srv_error(r, 400, "invalid_request_error", "filename",
                  "filename is required (a string: the file in --slot-save-path)");
        return NULL;
    }
    const char *f = json_string_value(v);
    const size_t n = json_string_length(v);
    int bad = n == 0 || n > 255 || strlen(f) != n || strstr(f, "..") != NULL;
    for (size_t i = 0; !bad && i < n; i++)
        bad = f[i] == '/' || f[i] == '\\' || (unsigned char)f[i] < 0x20;
    if (bad) {
        srv_error(r, 400, "invalid_request_error", "filename",
                  "filename must be 1 .. 255 bytes without '/', '\\', '..' or control bytes");
        return NULL;
    }
    return f;
}

static void put_u32(unsigned char *p, uint32_t v) {
    memcpy(p, &v, 4);
}
static uint32_t get_u32(const unsigned char *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

/* The file's bytes for tokens t[0 .. n): malloc'd, *len set; NULL on OOM. */
static unsigned char *encode(const sd_server *s, const int32_t *t, int32_t n, size_t *len) {
    const size_t words = 3 + (size_t)n;
    *len = 12 + 4 * words + SLOT_TRAILER_BYTES;
    unsigned char *b = malloc(*len), *p = b;
    if (!b) return NULL;
    put_u32(p, SLOT_MAGIC);
    put_u32(p + 4, SLOT_VERSION);
    put_u32(p + 8, (uint32_t)words);
    put_u32(p + 12, SLOT_PACKED);
    put_u32(p + 16, SLOT_PACKED_VERSION);
    put_u32(p + 20, (uint32_t)n);
    memcpy(p + 24, t, (size_t)n * 4);
    p += 12 + 4 * words;
    memcpy(p, SLOT_TRAILER_MAGIC, 4);
    put_u32(p + 4, 1);
    const uint64_t fp = sd_draft_vocab_fingerprint(sd_engine_vocab(s->e));
    memcpy(p + 8, &fp, 8);
    put_u32(p + 16, (uint32_t)sd_model_hparams(sd_engine_target(s->e))->n_vocab);
    return b;
}

/* Check the file's bytes b[0 .. len) and point *t at its n tokens (inside b). 0, or -1
 * with a one-line reason in why. */
static int decode(const sd_server *s, const unsigned char *b, size_t len, const int32_t **t,
                  int32_t *n, char *why, size_t why_n) {
    if (len < 12 || get_u32(b) != SLOT_MAGIC) {
        snprintf(why, why_n, "not a slot file (no 'ggsq' header)");
        return -1;
    }
    if (get_u32(b + 4) != SLOT_VERSION) {
        snprintf(why, why_n, "slot file version %u, expected %u", get_u32(b + 4), SLOT_VERSION);
        return -1;
    }
    const uint64_t words = get_u32(b + 8);
    if (12 + 4 * words + SLOT_TRAILER_BYTES != len) {
        snprintf(why, why_n,
                 "%zu bytes for %llu payload words: truncated, or not written by specdec (KV "
                 "state or no specdec trailer)",
                 len, (unsigned long long)words);
        return -1;
    }
    const unsigned char *p = b + 12;
    if (words >= 3 && get_u32(p) == SLOT_PACKED) {
        if (get_u32(p + 4) != SLOT_PACKED_VERSION || get_u32(p + 8) + 3ull != words) {
            snprintf(why, why_n, "packed token list: version %u, %u tokens in %llu words",
                     get_u32(p + 4), get_u32(p + 8), (unsigned long long)words);
            return -1;
        }
        p += 12;
        *n = (int32_t)(words - 3);
    } else {
        *n = (int32_t)words;
    }
    const unsigned char *tr = b + 12 + 4 * words;
    uint64_t fp;
    memcpy(&fp, tr + 8, 8);
    const int32_t nv = sd_model_hparams(sd_engine_target(s->e))->n_vocab;
    if (memcmp(tr, SLOT_TRAILER_MAGIC, 4) || get_u32(tr + 4) != 1) {
        snprintf(why, why_n, "no specdec trailer after the tokens");
        return -1;
    }
    if (fp != sd_draft_vocab_fingerprint(sd_engine_vocab(s->e)) ||
        get_u32(tr + 16) != (uint32_t)nv) {
        snprintf(why, why_n, "written for another vocabulary (%u entries), not this model's (%d)",
                 get_u32(tr + 16), nv);
        return -1;
    }
    if (*n < 1 || *n >= sd_batcher_n_ctx(s->b)) {
        snprintf(why, why_n, "%d tokens: expected 1 .. %d (a sequence's context less one)", *n,
                 sd_batcher_n_ctx(s->b) - 1);
        return -1;
    }
    *t = (const int32_t *)(const void *)p;
    for (int32_t i = 0; i < *n; i++) {
        int32_t id;
        memcpy(&id, p + 4 * (size_t)i, 4);
        if (id < 0 || id >= nv) {
            snprintf(why, why_n, "token %d at %d is outside [0, %d)", id, i, nv);
            return -1;
        }
    }
    return 0;
}

static char *path_of(const sd_server *s, const char *name) {
    const size_t n = strlen(s->p.slot_save_path) + strlen(name) + 2;
    char *p = malloc(n);
    if (p) snprintf(p, n, "%s/%s", s->p.slot_save_path, name);
    return p;
}

static void slot_save(sd_server *s, int32_t slot, const char *name, srv_reply *r) {
    const double t0 = sd_time_ms();
    pthread_mutex_lock(&s->slot_mu);
    const int32_t n = s->slot_rec[slot].n;
    size_t len = 0;
    unsigned char *b = s->slot_rec[slot].toks ? encode(s, s->slot_rec[slot].toks, n, &len) : NULL;
    const int none = !s->slot_rec[slot].toks;
    pthread_mutex_unlock(&s->slot_mu);
    if (none) {
        srv_error(r, 400, "invalid_request_error", NULL, "slot %d holds no sequence yet", slot);
        return;
    }
    char *path = b ? path_of(s, name) : NULL;
    char *tmp = path ? malloc(strlen(path) + 8) : NULL;
    if (!tmp) {
        free(b);
        free(path);
        srv_error(r, 500, "server_error", NULL, "out of memory");
        return;
    }
    sprintf(tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "wb");
    int ok = f && fwrite(b, 1, len, f) == len;
    if (f && fclose(f) != 0) ok = 0;
    const int err = errno;
    if (ok && rename(tmp, path) != 0) ok = 0;
    if (!ok) {
        unlink(tmp);
        srv_error(r, 500, "server_error", NULL, "slot %d: cannot write %s: %s", slot, name,
                  strerror(err ? err : errno));
    } else {
        srv_json(r, 200,
                 json_pack("{s:i,s:s,s:i,s:I,s:{s:f}}", "id_slot", (int)slot, "filename", name,
                           "n_saved", (int)n, "n_written", (json_int_t)len, "timings", "save_ms",
                           sd_time_ms() - t0));
    }
    free(b);
    free(path);
    free(tmp);
}

/* Erase through the stepping thread (a ticket). 0, or -1 with r filled. */
static int erase_wait(sd_server *s, srv_reply *r) {
    const long long ticket = atomic_fetch_add(&s->erase_asked, 1) + 1;
    const double end = sd_time_ms() + SLOT_ERASE_WAIT_MS;
    while (atomic_load(&s->erase_done) < ticket) {
        if (atomic_load(&s->stopping) || sd_time_ms() > end) {
            srv_error(r, 503, "server_error", NULL, "the erase was not served in time");
            return -1;
        }
        usleep(1000);
    }
    return 0;
}

/* The restore's one-token request: done when its choice ended (refs: the HTTP side and
 * the request's callback). */
typedef struct restore_wait {
    atomic_int done, refs;
    sd_stop_reason stop;
} restore_wait;

static void restore_unref(restore_wait *w) {
    if (atomic_fetch_sub(&w->refs, 1) == 1) free(w);
}

static int restore_cb(void *user, const sd_req_event *ev) {
    restore_wait *w = user;
    if (ev->done) {
        w->stop = ev->stop;
        atomic_store(&w->done, 1);
        restore_unref(w);
    }
    return 0;
}

static void slot_restore(sd_server *s, int32_t slot, const char *name, srv_reply *r) {
    const double t0 = sd_time_ms();
    char *path = path_of(s, name);
    unsigned char *b = NULL;
    size_t len = 0;
    char why[160] = "";
    const int32_t *t = NULL;
    int32_t n = 0;
    restore_wait *w = NULL;
    if (!path) {
        srv_error(r, 500, "server_error", NULL, "out of memory");
        goto done;
    }
    const int fd = open(path, O_RDONLY);
    struct stat sb;
    /* at most a whole sequence's tokens and the framing */
    const size_t cap = 12 + 4 * ((size_t)sd_batcher_n_ctx(s->b) + 3) + SLOT_TRAILER_BYTES;
    if (fd < 0 || fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        srv_error(r, 400, "invalid_request_error", "filename", "slot file %s: %s", name,
                  fd < 0 ? strerror(errno) : "not a regular file");
        if (fd >= 0) close(fd);
        goto done;
    }
    if ((size_t)sb.st_size > cap) {
        close(fd);
        srv_error(r, 400, "invalid_request_error", "filename",
                  "slot file %s: %lld bytes, more than a sequence's tokens (%zu)", name,
                  (long long)sb.st_size, cap);
        goto done;
    }
    len = (size_t)sb.st_size;
    b = malloc(len ? len : 1);
    const int rd = b && read(fd, b, len) == (ssize_t)len;
    close(fd);
    if (!rd) {
        srv_error(r, b ? 400 : 500, b ? "invalid_request_error" : "server_error", "filename",
                  "slot file %s: %s", name, b ? "short read" : "out of memory");
        goto done;
    }
    if (decode(s, b, len, &t, &n, why, sizeof why)) {
        srv_error(r, 400, "invalid_request_error", "filename", "slot file %s: %s", name, why);
        goto done;
    }
    int32_t *toks = malloc((size_t)n * sizeof *toks);
    w = calloc(1, sizeof *w);
    if (!toks || !w) {
        free(toks);
        srv_error(r, 500, "server_error", NULL, "out of memory");
        goto done;
    }
    memcpy(toks, t, (size_t)n * sizeof *toks);
    if (erase_wait(s, r)) {
        free(toks);
        goto done;
    }
    /* the tokens into the prefix cache: a greedy one-token request of the target alone */
    sd_request q;
    memset(&q, 0, sizeof q);
    q.prompt = toks;
    q.n_prompt = n;
    q.gen = s->p.gen;
    q.gen.n_predict = 1;
    q.gen.n_draft = 0;
    q.gen.samp.temp = 0.0f;
    q.gen.grammar = NULL;
    q.gen.logprobs = 0;
    q.gen.synth_accept = NULL;
    q.n_choices = 1;
    q.cb = restore_cb;
    q.user = w;
    atomic_store(&w->refs, 2);
    sd_error err = {0};
    const int rc = sd_batcher_submit(s->b, &q, NULL, &err);
    free(toks);
    if (rc) {
        atomic_store(&w->refs, 1);
        srv_error(r, rc == SD_ERR_BUSY ? 503 : 400,
                  rc == SD_ERR_BUSY ? "server_error" : "invalid_request_error", NULL,
                  "slot %d: restore: %s", slot, err.msg);
        goto done;
    }
    const double end = sd_time_ms() + SLOT_RESTORE_WAIT_MS;
    while (!atomic_load(&w->done) && sd_time_ms() < end)
        usleep(1000);
    if (!atomic_load(&w->done) || w->stop == SD_STOP_CANCEL || w->stop == SD_STOP_NONE) {
        srv_error(r, 503, "server_error", NULL, "slot %d: the restore did not finish", slot);
        goto done;
    }
    /* the slot's last sequence is now the file's */
    int32_t *rec = malloc((size_t)n * sizeof *rec);
    if (rec) {
        memcpy(rec, t, (size_t)n * sizeof *rec);
        pthread_mutex_lock(&s->slot_mu);
        free(s->slot_rec[slot].toks);
        s->slot_rec[slot].toks = rec;
        s->slot_rec[slot].n = n;
        s->slot_rec[slot].use = ++s->slot_use;
        pthread_mutex_unlock(&s->slot_mu);
    }
    srv_json(r, 200,
             json_pack("{s:i,s:s,s:i,s:I,s:{s:f}}", "id_slot", (int)slot, "filename", name,
                       "n_restored", (int)n, "n_read", (json_int_t)len, "timings", "restore_ms",
                       sd_time_ms() - t0));
done:
    if (w) restore_unref(w);
    free(b);
    free(path);
}

void srv_slot_action(sd_server *s, int32_t slot, const char *action, const char *body, size_t len,
                     srv_reply *r) {
    if (slot < 0 || slot >= s->p.n_slots) {
        srv_error(r, 400, "invalid_request_error", NULL, "no slot %d: slots are 0 .. %d", slot,
                  s->p.n_slots - 1);
        return;
    }
    if (!action) {
        srv_error(r, 400, "invalid_request_error", "action",
                  "the query's action is required (erase, save or restore)");
        return;
    }
    const int save = !strcmp(action, "save"), restore = !strcmp(action, "restore");
    if (save || restore) {
        if (!s->p.slot_save_path) {
            srv_error(r, 501, "not_supported_error", "action",
                      "slot %s needs --slot-save-path (the folder of the slot files)", action);
            return;
        }
        json_t *o = srv_parse_object(body, len, r);
        if (!o) return;
        const char *name = file_name(o, r);
        if (name && save) slot_save(s, slot, name, r);
        if (name && restore) slot_restore(s, slot, name, r);
        json_decref(o);
        return;
    }
    if (strcmp(action, "erase")) {
        srv_error(r, 400, "invalid_request_error", "action",
                  "action must be erase, save or restore");
        return;
    }
    if (erase_wait(s, r)) return;
    srv_json(r, 200,
             json_pack("{s:i,s:I}", "id_slot", (int)slot, "n_erased",
                       (json_int_t)atomic_load(&s->erase_n)));
}
