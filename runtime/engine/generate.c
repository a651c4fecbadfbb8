/* The speculative generation loop (see sd_engine.h). */
#include "runtime/engine/sd_engine.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

sd_gen_params sd_gen_default_params(void) {
    sd_gen_params p;
    memset(&p, 0, sizeof p);
    p.n_predict = 128;
    p.n_draft = 4;
    p.samp = sd_sampling_default_params();
    p.seed = 42;
    p.n_stop_ids = 0;
    p.draft_type = SD_DRAFT_AUTO;
    p.k_policy = SD_K_FIXED;
    p.draft_p_min = 0.0f;
    p.draft_min = 0;
    p.clock = SD_CLOCK_AUTO;
    p.k_trace = NULL;
    p.k_trace_cap = 0;
    return p;
}

const char *sd_stop_reason_str(sd_stop_reason r) {
    switch (r) {
    case SD_STOP_NONE:
        return "none";
    case SD_STOP_EOS:
        return "eos";
    case SD_STOP_MAX_TOKENS:
        return "max_tokens";
    case SD_STOP_CONTEXT:
        return "context";
    case SD_STOP_STRING:
        return "stop";
    case SD_STOP_CANCEL:
        return "cancelled";
    }
    return "unknown";
}

double sd_stats_acceptance_rate(const sd_gen_stats *s) {
    return s->n_drafted > 0 ? (double)s->n_accepted / s->n_drafted : 0.0;
}

double sd_stats_accept_at(const sd_gen_stats *s, int32_t i) {
    if (i < 0 || i >= SD_MAX_DRAFT || s->drafted_at[i] == 0) return 0.0;
    return (double)s->accepted_at[i] / s->drafted_at[i];
}

double sd_stats_mean_k(const sd_gen_stats *s) {
    int64_t n = 0, sum = 0;
    for (int32_t k = 0; k <= SD_MAX_DRAFT; k++) {
        n += s->k_hist[k];
        sum += (int64_t)k * s->k_hist[k];
    }
    return n > 0 ? (double)sum / (double)n : 0.0;
}

double sd_stats_tokens_per_pass(const sd_gen_stats *s) {
    return s->n_target_passes > 0 ? (double)s->n_generated / s->n_target_passes : 0.0;
}

double sd_stats_tokens_per_s(const sd_gen_stats *s) {
    double t = s->t_total_ms - s->t_prefill_ms;
    return t > 0.0 ? s->n_generated / (t * 1e-3) : 0.0;
}

double sd_stats_itl_ms(const sd_gen_stats *s) {
    return s->n_generated > 1 ? (s->t_total_ms - s->t_first_ms) / (s->n_generated - 1) : 0.0;
}

/* A probe's catch-up (sd_proposer_catch_up) is windowed to this many tokens once a full
 * one has cost more than CATCHUP_BUDGET target-alone passes per token caught up: then
 * catching up on every token generated while off would cost that fraction of the
 * time off, whatever the back-off (on the shipped TinyStories pair a draft prefill
 * token costs about 12% of a target step). */
#define CATCHUP_WINDOW 16
#define CATCHUP_BUDGET 0.02

/* The controller's clock in ms (see sd_pass_clock). */
static double pass_clock_ms(sd_pass_clock c) {
    if (c != SD_CLOCK_THREAD_CPU) return sd_time_ms();
    struct timespec ts;
    if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts)) return sd_time_ms();
    return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

/* Buffers of one generation, all allocated before the loop. */
typedef struct gen_buffers {
    int32_t *ctx;      /* [n_prompt + n_predict] committed tokens */
    float *logits;     /* [SD_MAX_DRAFT + 1, n_vocab] target rows */
    float *probs;      /* [SD_MAX_DRAFT + 1, n_vocab] warped target rows */
    float *residual;   /* [n_vocab] */
    int32_t *iscratch; /* [n_vocab] */
} gen_buffers;

static void gen_buffers_free(gen_buffers *b) {
    free(b->ctx);
    free(b->logits);
    free(b->probs);
    free(b->residual);
    free(b->iscratch);
}

static int gen_buffers_init(gen_buffers *b, int32_t n_ctx, int32_t n_vocab, sd_error *err) {
    memset(b, 0, sizeof *b);
    size_t rows;
    if (sd_mul_size((size_t)(SD_MAX_DRAFT + 1), (size_t)n_vocab, &rows) ||
        sd_mul_size(rows, sizeof(float), &rows))
        return sd_errorf(err, SD_ERR_OOM, "generate: vocabulary too large");
    b->ctx = malloc((size_t)n_ctx * sizeof(int32_t));
    b->logits = malloc(rows);
    b->probs = malloc(rows);
    b->residual = malloc((size_t)n_vocab * sizeof(float));
    b->iscratch = malloc((size_t)n_vocab * sizeof(int32_t));
    if (!b->ctx || !b->logits || !b->probs || !b->residual || !b->iscratch) {
        gen_buffers_free(b);
        return sd_errorf(err, SD_ERR_OOM, "generate: out of memory");
    }
    return SD_OK;
}

/* 1 if t is one of gp's extra stop ids. */
static int is_stop(const sd_gen_params *gp, int32_t t) {
    for (int32_t i = 0; i < gp->n_stop_ids && i < SD_MAX_STOP_IDS; i++)
        if (gp->stop_ids[i] == t) return 1;
    return 0;
}

/* One verification: fills res from the target rows and the proposal. */
static int verify_step(const sd_gen_params *gp, const sd_proposal *prop, int32_t k, int32_t n_vocab,
                       gen_buffers *b, sd_rng *rng, sd_verify_result *res, sd_error *err) {
    if (gp->samp.temp <= 0.0f)
        return sd_verify_greedy(prop->tokens, k, b->logits, n_vocab, res, err);
    for (int32_t i = 0; i <= k; i++) {
        int rc = sd_warp(&gp->samp, b->logits + (size_t)i * n_vocab, n_vocab,
                         b->probs + (size_t)i * n_vocab, b->iscratch, err);
        if (rc) return rc;
    }
    if (k > 0 && prop->one_hot) /* q = point masses: exact verification without rows */
        return sd_verify_onehot(prop->tokens, k, b->probs, n_vocab, rng, res, err);
    return sd_verify_sample(prop->tokens, k, prop->probs, b->probs, n_vocab, rng, b->residual, res,
                            err);
}

int sd_generate(sd_scorer *target, sd_proposer *draft, const int32_t *prompt, int32_t n_prompt,
                int32_t eos, const sd_gen_params *gp, sd_token_cb cb, void *user, int32_t *out,
                int32_t cap_out, sd_gen_stats *st, sd_error *err) {
    memset(st, 0, sizeof *st);
    st->n_prompt = n_prompt;
    const int32_t n_ctx_max = sd_scorer_n_ctx(target);
    const int32_t n_vocab = sd_model_hparams(sd_scorer_model(target))->n_vocab;
    if (n_prompt < 1) return sd_errorf(err, SD_ERR_ARG, "generate: empty prompt");
    if (gp->n_predict < 1 || cap_out < gp->n_predict)
        return sd_errorf(err, SD_ERR_ARG, "generate: n_predict %d must be >= 1 and <= %d",
                         gp->n_predict, cap_out);
    if (draft && (gp->n_draft < 1 || gp->n_draft > SD_MAX_DRAFT))
        return sd_errorf(err, SD_ERR_ARG, "generate: draft tokens %d outside [1, %d]", gp->n_draft,
                         SD_MAX_DRAFT);
    if (n_prompt > n_ctx_max)
        return sd_errorf(err, SD_ERR_CONTEXT,
                         "prompt of %d tokens does not fit the context of %d tokens", n_prompt,
                         n_ctx_max);
    /* At most n_ctx_max + 1 tokens are ever committed (the last is never fed back). */
    int64_t cap_ctx = (int64_t)n_prompt + gp->n_predict;
    if (cap_ctx > (int64_t)n_ctx_max + 1) cap_ctx = (int64_t)n_ctx_max + 1;
    gen_buffers b;
    int rc = gen_buffers_init(&b, (int32_t)cap_ctx, n_vocab, err);
    if (rc) return rc;
    sd_rng rng;
    sd_rng_seed(&rng, gp->seed);
    memcpy(b.ctx, prompt, (size_t)n_prompt * sizeof(int32_t));
    int32_t n_ctx = n_prompt;

    sd_adaptive ctl;
    const int adaptive = draft && gp->k_policy == SD_K_ADAPTIVE;
    const sd_pass_clock clock =
        gp->clock == SD_CLOCK_THREAD_CPU ? SD_CLOCK_THREAD_CPU : SD_CLOCK_WALL;
    if (adaptive) {
        sd_adaptive_params ap = sd_adaptive_default_params();
        ap.k_max = gp->n_draft;
        if ((rc = sd_adaptive_init(&ctl, &ap, err))) goto done_early;
    }

    int32_t n_ctx_drafted = n_ctx; /* the context when the proposer last drafted */
    int catchup_expensive = 0;
    const double t0 = sd_time_ms();
    rc = sd_scorer_sync(target, b.ctx, n_ctx, err); /* prefill */
    if (!rc && draft) rc = sd_proposer_prefill(draft, b.ctx, n_ctx, err);
    if (rc) goto done;
    st->t_prefill_ms = sd_time_ms() - t0;

    while (st->n_generated < gp->n_predict) {
        if (n_ctx > n_ctx_max) {
            st->stop = SD_STOP_CONTEXT;
            break;
        }
        /* The policy's K (0: a target-alone pass), capped so one step never emits past
         * the budget or the context. */
        const int was_off = adaptive && sd_adaptive_is_off(&ctl);
        int32_t k = draft ? (adaptive ? sd_adaptive_next_k(&ctl) : gp->n_draft) : 0;
        const int off_pass = was_off && k == 0;
        const int32_t budget = gp->n_predict - st->n_generated - 1;
        if (k > budget) k = budget;
        if (k > n_ctx_max - n_ctx) k = n_ctx_max - n_ctx;
        if (k < 0) k = 0;
        if (gp->k_trace && st->n_target_passes < gp->k_trace_cap)
            gp->k_trace[st->n_target_passes] = (uint8_t)k;
        st->k_hist[k]++;
        sd_proposal prop = {0};
        prop.n_vocab = n_vocab;
        double t_draft = 0.0; /* on the controller's clock */
        if (k > 0) {
            double t = sd_time_ms();
            if (was_off) {
                /* A probe after target-alone passes: the draft catches up on the tokens
                 * it skipped first, timed apart so the controller's per-token draft cost
                 * stays the cost of drafting; windowed once that proved expensive. */
                const int32_t lag = n_ctx - n_ctx_drafted;
                const int32_t window = catchup_expensive ? CATCHUP_WINDOW : 0;
                const double c0 = pass_clock_ms(clock);
                rc = sd_proposer_catch_up(draft, b.ctx, n_ctx, window, err);
                const double c1 = pass_clock_ms(clock), t1 = sd_time_ms();
                if (!window && lag >= CATCHUP_WINDOW)
                    catchup_expensive =
                        (c1 - c0) / lag > CATCHUP_BUDGET * sd_adaptive_pass_ms(&ctl, 1);
                st->t_draft_ms += t1 - t;
                t = t1;
                if (rc) goto done;
            }
            n_ctx_drafted = n_ctx;
            const double c0 = pass_clock_ms(clock);
            rc = sd_proposer_propose(draft, b.ctx, n_ctx, k, &prop, err);
            t_draft = pass_clock_ms(clock) - c0; /* on the controller's clock */
            st->t_draft_ms += sd_time_ms() - t;
            if (rc) goto done;
            k = prop.n;
            if (k > 0 && prop.n_vocab != n_vocab) {
                rc = sd_errorf(err, SD_ERR_MISMATCH,
                               "draft proposal rows have %d entries, the target vocabulary %d",
                               prop.n_vocab, n_vocab);
                goto done;
            }
        }
        const double t_pass0 = sd_time_ms(), c_pass0 = pass_clock_ms(clock);
        double t = t_pass0;
        rc = sd_scorer_score(target, b.ctx, n_ctx, prop.tokens, k, b.logits, err);
        st->t_verify_ms += sd_time_ms() - t;
        if (rc) goto done;
        if (gp->ignore_eos) /* EOS and the stop ids (end of turn) never win, as llama.cpp */
            for (int32_t i = 0; i <= k; i++) {
                float *row = b.logits + (size_t)i * n_vocab;
                if (eos >= 0 && eos < n_vocab) row[eos] = -INFINITY;
                for (int32_t j = 0; j < gp->n_stop_ids && j < SD_MAX_STOP_IDS; j++)
                    if (gp->stop_ids[j] >= 0 && gp->stop_ids[j] < n_vocab)
                        row[gp->stop_ids[j]] = -INFINITY;
            }
        st->n_target_passes++;

        t = sd_time_ms();
        sd_verify_result res;
        rc = verify_step(gp, &prop, k, n_vocab, &b, &rng, &res, err);
        st->t_sample_ms += sd_time_ms() - t;
        if (rc) {
            /* Name the model: a NaN logit here means corrupt weights in that file. */
            sd_error_prefix(err, "%s: verification failed", sd_model_path(sd_scorer_model(target)));
            goto done;
        }

        const int lookup = k > 0 && prop.one_hot;
        st->n_drafted += k;
        if (lookup) {
            st->n_passes_lookup++;
            st->n_drafted_lookup += k;
        }
        for (int32_t i = 0; i < k; i++)
            st->drafted_at[i]++;
        const int32_t first_new = n_ctx;
        for (int32_t i = 0; i < res.n_tokens; i++) {
            if (res.tokens[i] == eos || is_stop(gp, res.tokens[i])) {
                st->stop = SD_STOP_EOS;
                break;
            }
            b.ctx[n_ctx++] = res.tokens[i];
            out[st->n_generated++] = res.tokens[i];
            if (i < res.n_accepted) {
                st->n_accepted++;
                st->accepted_at[i]++;
                if (lookup) st->n_accepted_lookup++;
            }
        }
        /* KV commit: both caches roll back to the committed tokens. */
        sd_scorer_commit(target, b.ctx, n_ctx);
        if (draft) sd_proposer_commit(draft, b.ctx, n_ctx);
        const double t_pass = sd_time_ms() - t_pass0;
        if (off_pass) {
            st->n_off_passes++;
            st->t_off_ms += t_pass;
        }
        if (adaptive)
            sd_adaptive_observe(&ctl, k, res.n_accepted, t_draft, pass_clock_ms(clock) - c_pass0);
        const int32_t n_new = n_ctx - first_new;
        if (n_new > 0 && st->t_first_ms == 0.0) {
            st->t_first_ms = sd_time_ms() - t0;
            st->ttft_ms = st->t_first_ms;
        }
        if (n_new > 0 && cb && cb(user, b.ctx + first_new, n_new)) break;
        if (st->stop == SD_STOP_EOS) break;
    }
    if (st->stop == SD_STOP_NONE && st->n_generated >= gp->n_predict) st->stop = SD_STOP_MAX_TOKENS;
    rc = SD_OK;
done:
    st->t_total_ms = sd_time_ms() - t0;
    if (adaptive) {
        st->n_switch_off = ctl.n_switch_off;
        st->n_probes = ctl.n_probes;
    }
done_early:
    gen_buffers_free(&b);
    return rc;
}
