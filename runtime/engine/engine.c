/* runtime/engine/engine.c: loading and pairing a target and a draft (see sd_engine.h); the
 * generate context above it and sd_engine_free are gen_entry.c's. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/engine/engine_impl.h"

sd_engine_params sd_engine_default_params(void) {
    sd_engine_params p;
    memset(&p, 0, sizeof p);
    p.kv_type = SD_TYPE_F16; /* every client's default (generate, serve, bench), as llama.cpp */
    p.device = p.device_draft = SD_DEVICE_CPU;
    p.gen = sd_gen_default_params();
    p.ngram = sd_ngram_default_params();
    p.suffix = sd_suffix_default_params();
    return p;
}

static void note(const sd_engine *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void note(const sd_engine *e, const char *fmt, ...) {
    if (!e->p.log) return;
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    e->p.log(e->p.log_user, line);
}

static int load(const char *path, const char *origin, sd_model **out, sd_error *err) {
    int rc = sd_model_load(path, out, err);
    if (rc && origin) sd_error_prefix(err, rc, "%s", origin);
    return rc;
}

/* The trimmed draft head of p->draft_head (its first draft_head_n ids). */
static int set_head(sd_engine *e, sd_error *err) {
    int32_t *ids = NULL, n = 0;
    int rc = sd_draft_head_load(e->p.draft_head, sd_model_vocab(e->tm), e->p.draft_head_n, &ids, &n,
                                err);
    if (!rc) rc = sd_proposer_llm_set_head(e->prop, ids, n, err);
    free(ids);
    return rc;
}

/* See engine_impl.h. */
int sd_engine_sessions(sd_engine *e, sd_error *err) {
    if (e->scorer || e->p.models_only) return SD_OK;
    int rc = sd_scorer_init(e->tm, &e->sp, &e->scorer, err);
    if (rc) return rc;
    /* The draft runs on the target's CPU threads: they take turns, and a second pool's
     * idle workers would only compete with the first for the cores. */
    e->dsp.share_threads = sd_scorer_session(e->scorer);
    if (e->dm && !(rc = sd_proposer_llm_init(e->dm, &e->dsp, &e->p.gen.samp, e->p.gen.seed,
                                             sd_model_hparams(e->tm)->n_vocab, &e->prop, err))) {
        if (e->p.draft_head) rc = set_head(e, err);
        if (!rc) rc = sd_proposer_chain_init(e->ngram, e->prop, "ngram+llm", &e->ngram_llm, err);
        if (!rc) rc = sd_proposer_chain_init(e->suffix, e->prop, "suffix+llm", &e->suffix_llm, err);
    }
    if (rc) {
        sd_proposer_free(e->ngram_llm);
        sd_proposer_free(e->suffix_llm);
        sd_proposer_free(e->prop);
        sd_scorer_free(e->scorer);
        e->ngram_llm = e->suffix_llm = e->prop = NULL;
        e->scorer = NULL;
        e->dsp.share_threads = NULL;
    }
    return rc;
}

int sd_engine_init(const sd_engine_params *p, sd_engine **out, sd_error *err) {
    *out = NULL;
    if (!p || !p->target) return sd_errorf(err, SD_ERR_ARG, "engine: no target model");
    sd_ngram_params np = p->ngram;
    np.n_ctx = 1; /* the capacity is set below, from the context */
    sd_suffix_params xp = p->suffix;
    xp.n_ctx = 1;
    int rc0 = sd_ngram_check_params(&np, err);
    if (!rc0) rc0 = sd_suffix_check_params(&xp, err);
    if (rc0) return rc0;
    sd_engine *e = calloc(1, sizeof *e);
    if (!e) return sd_errorf(err, SD_ERR_OOM, "engine: out of memory");
    e->p = *p;
    int rc = load(p->target, p->target_origin, &e->tm, err);
    if (rc) goto fail;
    const int32_t n_train = sd_model_hparams(e->tm)->n_ctx_train;
    e->n_ctx = p->n_ctx;
    if (e->n_ctx <= 0 || e->n_ctx > n_train) {
        if (e->n_ctx > n_train)
            note(e, "context size %d (n_ctx) exceeds %s's training context %d; using %d", e->n_ctx,
                 p->target, n_train, n_train);
        e->n_ctx = n_train;
    }
    sd_session_params sp = sd_session_default_params();
    sp.n_ctx = e->n_ctx;
    sp.n_threads = p->n_threads;
    sp.kv_type = p->kv_type;
    sp.device = p->device;
    sd_session_params dsp = sp;
    dsp.device = p->device_draft; /* the draft is never split */
    sp.n_split = p->n_split;
    if (p->draft) {
        if ((rc = load(p->draft, p->draft_origin, &e->dm, err))) goto fail;
        if ((rc = sd_vocab_check_pair(sd_model_vocab(e->tm), p->target, sd_model_vocab(e->dm),
                                      p->draft, err)))
            goto fail;
        const int32_t dctx = sd_model_hparams(e->dm)->n_ctx_train;
        if (p->n_ctx_draft > 0) dsp.n_ctx = p->n_ctx_draft;
        if (p->n_ctx_draft > dctx)
            note(e,
                 "draft context size %d (n_ctx_draft) exceeds %s's training context %d; using %d",
                 p->n_ctx_draft, p->draft, dctx, dctx);
        if (dsp.n_ctx > dctx) dsp.n_ctx = dctx; /* drafting stops near the draft's limit */
        e->n_ctx_draft = dsp.n_ctx;
    }
    e->sp = sp;
    e->dsp = dsp;
    if (p->models_only) goto done; /* a server's batcher makes its own sessions */
    /* The n-gram proposer indexes every committed token: at most the context + 1. */
    np.n_ctx = e->n_ctx + 1;
    if ((rc = sd_proposer_ngram_init(&np, sd_model_hparams(e->tm)->n_vocab, &e->ngram, err)))
        goto fail;
    xp.n_ctx = e->n_ctx + 1;
    if ((rc = sd_proposer_suffix_init(&xp, sd_model_hparams(e->tm)->n_vocab, &e->suffix, err)))
        goto fail;
    const sd_grammar_vocab *tb = NULL; /* the suffix proposer's byte-level matching */
    if ((rc = sd_engine_grammar_vocab(e, &tb, err)) ||
        (rc = sd_proposer_suffix_set_bytes(e->suffix, tb, err)))
        goto fail;
    if (e->dm && p->draft_head) { /* the head file is read now, its errors the engine's */
        int32_t *ids = NULL, n = 0;
        rc = sd_draft_head_load(p->draft_head, sd_model_vocab(e->tm), p->draft_head_n, &ids, &n,
                                err);
        free(ids);
        if (rc) goto fail;
    }
    /* sd_engine_generate runs a batcher of its own (gen_batch.c), on the CPU or a device,
     * split or not: the single-sequence sessions (their KV cache and the weights they place)
     * are made when first needed (sessions()). A device that cannot run, or a split the
     * target's shape or the devices do not allow, is named now, not at the first request. */
    if ((rc = sd_session_split_check(e->tm, &sp, err)) ||
        (rc = sd_session_device_check(p->device, err)) ||
        (p->draft && (rc = sd_session_device_check(p->device_draft, err))))
        goto fail;
done:
    *out = e;
    return SD_OK;
fail:
    sd_engine_release(e);
    return rc;
}

void sd_engine_release(sd_engine *e) {
    if (!e) return;
    SD_CHECK(!e->gen, "the generate context is freed first (sd_engine_free)");
    sd_proposer_free(e->ngram_llm);
    sd_proposer_free(e->suffix_llm);
    sd_proposer_free(e->ngram);
    sd_proposer_free(e->suffix);
    sd_proposer_free(e->prop);
    sd_grammar_vocab_free(e->gvocab);
    sd_scorer_free(e->scorer);
    sd_model_free(e->dm);
    sd_model_free(e->tm);
    free(e);
}

const sd_model *sd_engine_target(const sd_engine *e) {
    return e->tm;
}
const sd_model *sd_engine_draft(const sd_engine *e) {
    return e->dm;
}
const sd_vocab *sd_engine_vocab(const sd_engine *e) {
    return sd_model_vocab(e->tm);
}
/* The sessions for a caller that asks for them (NULL where they cannot be made). */
static void need_sessions(sd_engine *e) {
    sd_error err = {0};
    (void)sd_engine_sessions(e, &err);
}
sd_scorer *sd_engine_scorer(sd_engine *e) {
    need_sessions(e);
    return e->scorer;
}
sd_proposer *sd_engine_proposer(sd_engine *e) {
    need_sessions(e);
    return e->prop;
}
sd_proposer *sd_engine_proposer_of(sd_engine *e, sd_draft_type t) {
    if (t != SD_DRAFT_NGRAM && t != SD_DRAFT_SUFFIX && t != SD_DRAFT_NONE) need_sessions(e);
    switch (t) {
    case SD_DRAFT_AUTO:
    case SD_DRAFT_LLM:
        return e->prop;
    case SD_DRAFT_NGRAM:
        return e->ngram;
    case SD_DRAFT_NGRAM_LLM:
        return e->ngram_llm;
    case SD_DRAFT_SUFFIX:
        return e->suffix;
    case SD_DRAFT_SUFFIX_LLM:
        return e->suffix_llm;
    case SD_DRAFT_NONE:
        break;
    }
    return NULL;
}
int sd_engine_has_proposer(const sd_engine *e, sd_draft_type t) {
    if (e->p.models_only || t == SD_DRAFT_NONE) return 0;
    return t == SD_DRAFT_NGRAM || t == SD_DRAFT_SUFFIX || e->dm != NULL;
}
int32_t sd_engine_n_ctx(const sd_engine *e) {
    return e->n_ctx;
}
int32_t sd_engine_n_ctx_draft(const sd_engine *e) {
    return e->n_ctx_draft;
}
const sd_engine_params *sd_engine_params_of(const sd_engine *e) {
    return &e->p;
}

sd_session_params sd_engine_session_params(const sd_engine *e, int draft) {
    return draft ? e->dsp : e->sp;
}

int sd_engine_grammar_vocab(sd_engine *e, const sd_grammar_vocab **out, sd_error *err) {
    *out = e->gvocab;
    if (e->gvocab) return SD_OK;
    const sd_vocab *v = sd_model_vocab(e->tm);
    const int32_t n = sd_model_hparams(e->tm)->n_vocab; /* ids past the vocabulary: no bytes */
    char **pieces = calloc((size_t)(n > 0 ? n : 1), sizeof *pieces);
    size_t *lens = calloc((size_t)(n > 0 ? n : 1), sizeof *lens);
    int rc = pieces && lens ? SD_OK : sd_errorf(err, SD_ERR_OOM, "grammar: out of memory");
    char buf[256];
    for (int32_t i = 0; i < n && !rc; i++) {
        const int len = sd_vocab_token_to_piece(v, i, 0, buf, sizeof buf);
        if (len <= 0) continue;
        pieces[i] = malloc((size_t)len);
        if (!pieces[i]) {
            rc = sd_errorf(err, SD_ERR_OOM, "grammar: out of memory");
            break;
        }
        if ((size_t)len <= sizeof buf)
            memcpy(pieces[i], buf, (size_t)len);
        else
            sd_vocab_token_to_piece(v, i, 0, pieces[i], (size_t)len);
        lens[i] = (size_t)len;
    }
    if (!rc) rc = sd_grammar_vocab_init((const char *const *)pieces, lens, n, &e->gvocab, err);
    for (int32_t i = 0; pieces && i < n; i++)
        free(pieces[i]);
    free(pieces);
    free(lens);
    *out = e->gvocab;
    return rc;
}

double sd_engine_draft_prior(const sd_engine *e, sd_draft_type t) {
    const int llm = t != SD_DRAFT_NGRAM && t != SD_DRAFT_SUFFIX && e->dm;
    return llm ? (double)sd_model_weight_bytes(e->dm) / (double)sd_model_weight_bytes(e->tm) : 0.01;
}

/* ---- draft-type names ---- */

int sd_draft_type_uses_llm(sd_draft_type t) {
    return t == SD_DRAFT_LLM || t == SD_DRAFT_NGRAM_LLM || t == SD_DRAFT_SUFFIX_LLM;
}

const char *sd_draft_type_name(sd_draft_type t) {
    switch (t) {
    case SD_DRAFT_AUTO:
        return "auto";
    case SD_DRAFT_NONE:
        return "none";
    case SD_DRAFT_LLM:
        return "llm";
    case SD_DRAFT_NGRAM:
        return "ngram";
    case SD_DRAFT_NGRAM_LLM:
        return "ngram+llm";
    case SD_DRAFT_SUFFIX:
        return "suffix";
    case SD_DRAFT_SUFFIX_LLM:
        return "suffix+llm";
    }
    return "unknown";
}

int sd_draft_type_parse(const char *s, sd_draft_type *out) {
    static const struct {
        const char *name;
        sd_draft_type t;
    } names[] = {
        {"auto", SD_DRAFT_AUTO},
        {"none", SD_DRAFT_NONE},
        {"llm", SD_DRAFT_LLM},
        {"draft", SD_DRAFT_LLM},
        {"draft-simple", SD_DRAFT_LLM},
        {"ngram", SD_DRAFT_NGRAM},
        {"ngram-simple", SD_DRAFT_NGRAM},
        {"ngram+llm", SD_DRAFT_NGRAM_LLM},
        {"suffix", SD_DRAFT_SUFFIX},
        {"suffix+llm", SD_DRAFT_SUFFIX_LLM},
    };
    if (!s) return -1;
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (!strcmp(s, names[i].name)) {
            *out = names[i].t;
            return 0;
        }
    return -1;
}
