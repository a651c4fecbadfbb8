/*
 * specdec bench (A/B): target alone vs speculative on the same prompts and seeds.
 *
 * A/B mode
 *   specdec bench [--config F] [-m TARGET] [-md DRAFT] [-f PROMPTS | -p TEXT]
 *                 [--runs N] [--k-list 1,2,4,8 | -k K] [-n N] [--temp T] [--top-k N]
 *                 [--top-p P] [--seed S] [-t N] [-c N] [--no-bos] [--warmup N]
 *                 [--reps N] [--json FILE]
 * Models are loaded once. For each K, for run i = 0 .. N-1: prompt i mod n_prompts,
 * seed S + i; side A generates with the target alone, then side B speculatively with K
 * drafted tokens (ABAB), both through sd_engine_generate (the one-slot batcher: its
 * prefix cache is emptied before each run so neither side inherits the other's prefill). Greedy by
 * default (--temp 0): each B run's tokens must equal its A run's ("greedy_match").
 *   tokens/s  emitted tokens / decode time (prefill excluded), median / min / max
 *   speedup   median (and min, max) of the per-pair ratios B tok/s / A tok/s
 *   acceptance rate a = accepted / drafted over the K's B runs; mean accepted tokens
 *             per target pass = accepted / target passes; per-position acceptance
 *   TTFT      start of prefill -> first token, p50 / p90 over runs
 *   ITL       per-token inter-token latency, p50 / p90 over every token of the side's
 *             runs: a block of n tokens emitted by one step t ms after the previous
 *             block counts n latencies of t / n; the first token is TTFT and the other
 *             tokens of the first block count 0 (so the mean equals the stats' ITL)
 *   predicted speedup  (1 - a^(K+1)) / ((1 - a) (K c + v))  (Leviathan et al. 2023,
 *             eq. 1 and Thm 3.8 with the verification cost measured rather than assumed
 *             equal to a decode step); a -> 1 gives (K + 1) / (K c + v);
 *             c = draft decode step / target decode step, v = target (K+1)-token
 *             verification pass / target decode step: sd_session_eval timed on their own
 *             sessions at position n_prompt + n/2, median of --reps, in the same process
 *             before the runs.
 *
 */
#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "quant/sd_quant.h"
#include "tools/bench.h"
#include "runtime/engine/sd_engine.h"
#include "runtime/tokenizer/sd_vocab.h"

typedef struct itl_rec {
    double t_prev;
    int first_done;
    bench_dvec *samples;
    int oom;
} itl_rec;

static int itl_cb(void *user, const int32_t *tokens, int32_t n) {
    (void)tokens;
    itl_rec *r = user;
    const double now = sd_time_ms();
    if (!r->first_done) {
        r->first_done = 1;
        for (int32_t i = 1; i < n; i++)
            r->oom |= bench_dvec_push(r->samples, 0.0);
    } else {
        const double gap = (now - r->t_prev) / n;
        for (int32_t i = 0; i < n; i++)
            r->oom |= bench_dvec_push(r->samples, gap);
    }
    r->t_prev = now;
    return 0;
}

typedef struct side_acc { /* one side (A or B) of one K */
    bench_dvec tps, ttft, itl;
    sd_gen_stats sum; /* the runs' statistics added up (sd_stats_add) */
} side_acc;

static void side_free(side_acc *s) {
    bench_dvec_free(&s->tps);
    bench_dvec_free(&s->ttft);
    bench_dvec_free(&s->itl);
}

typedef struct ab_ctx {
    const bench_cli *c;
    sd_cli_pair *p;
    sd_engine *e;
    int32_t **prompt_ids;
    int32_t *n_prompt_ids;
    int n_prompts;
    int32_t max_prompt;
    int32_t *out_a, *out_b;
    int32_t ks[MAX_KS];
    int n_ks;
    /* Step costs (ms) at position pos, measured before the runs. */
    int32_t pos;
    double t_tstep, t_dstep, t_ver[MAX_KS];
    int all_match;
    json_t *jruns, *jsum;
} ab_ctx;

/* One generation; K = 0 for target alone. Both caches are emptied first, so each run
 * prefills its prompt from scratch and neither side inherits the other's prefill. */
static int one_run(ab_ctx *a, int pi, uint64_t seed, int32_t k, int32_t *out, side_acc *acc,
                   sd_gen_stats *st, sd_error *err) {
    sd_gen_params gp = a->p->ep.gen;
    gp.seed = seed;
    gp.n_draft = k;
    /* each run prefills from scratch: the one-slot batcher's prefix cache emptied */
    sd_engine_clear_cache(a->e);
    bench_dvec scratch = {0};
    itl_rec rec = {0, 0, acc ? &acc->itl : &scratch, 0};
    int rc = sd_engine_generate(a->e, &gp, a->prompt_ids[pi], a->n_prompt_ids[pi], itl_cb, &rec,
                                out, gp.n_predict, st, err);
    bench_dvec_free(&scratch);
    if (!rc && rec.oom) rc = sd_errorf(err, SD_ERR_OOM, "bench: out of memory");
    if (rc || !acc) return rc;
    int e = bench_dvec_push(&acc->tps, sd_stats_tokens_per_s(st));
    e |= bench_dvec_push(&acc->ttft, st->ttft_ms);
    if (e) return sd_errorf(err, SD_ERR_OOM, "bench: out of memory");
    sd_stats_add(&acc->sum, st);
    return SD_OK;
}

static json_t *run_record(int32_t k, int64_t run, int pi, uint64_t seed, const char *side,
                          const sd_gen_stats *st, int32_t k_used) {
    json_t *pp = json_array();
    for (int32_t i = 0; i < k_used; i++)
        json_array_append_new(
            pp,
            bench_jnum(st->drafted_at[i] ? (double)st->accepted_at[i] / st->drafted_at[i] : 0.0));
    return json_pack(
        "{s:i,s:I,s:i,s:I,s:s,s:i,s:i,s:i,s:i,s:i,s:o,s:o,s:o,s:o,s:o,s:o,s:o,s:o,s:o,s:o,s:o,"
        "s:s}",
        "k", k, "run", (json_int_t)run, "prompt_index", pi, "seed", (json_int_t)seed, "side", side,
        "n_prompt", st->n_prompt, "n_generated", st->n_generated, "n_target_passes",
        st->n_target_passes, "n_drafted", st->n_drafted, "n_accepted", st->n_accepted,
        "acceptance_rate", bench_jnum(sd_stats_acceptance_rate(st)), "tokens_per_pass",
        bench_jnum(sd_stats_tokens_per_pass(st)), "per_position_acceptance", pp, "tokens_per_s",
        bench_jnum(sd_stats_tokens_per_s(st)), "ttft_ms", bench_jnum(st->ttft_ms), "itl_ms",
        bench_jnum(sd_stats_itl_ms(st)), "t_prefill_ms", bench_jnum(st->t_prefill_ms), "t_draft_ms",
        bench_jnum(st->t_draft_ms), "t_verify_ms", bench_jnum(st->t_verify_ms), "t_sample_ms",
        bench_jnum(st->t_sample_ms), "t_total_ms", bench_jnum(st->t_total_ms), "stop",
        sd_stop_reason_str(st->stop));
}

static json_t *side_json(const side_acc *s, int spec, int32_t k) {
    json_t *o =
        json_pack("{s:o,s:o,s:o,s:I,s:I,s:i}", "tokens_per_s", bench_jstats3(s->tps.v, s->tps.n),
                  "ttft_ms", bench_jpct(s->ttft.v, s->ttft.n), "itl_ms",
                  bench_jpct(s->itl.v, s->itl.n), "n_generated", (json_int_t)s->sum.n_generated,
                  "n_target_passes", (json_int_t)s->sum.n_target_passes, "n_runs", (int)s->tps.n);
    if (spec) {
        json_t *pp = json_array();
        for (int32_t i = 0; i < k; i++)
            json_array_append_new(pp, bench_jnum(sd_stats_accept_at(&s->sum, i)));
        json_object_set_new(o, "n_drafted", json_integer(s->sum.n_drafted));
        json_object_set_new(o, "n_accepted", json_integer(s->sum.n_accepted));
        json_object_set_new(o, "per_position_acceptance", pp);
    }
    json_object_set_new(o, "tokens_per_pass", bench_jnum(sd_stats_tokens_per_pass(&s->sum)));
    return o;
}

static double predicted_speedup(double a, int32_t k, double c, double v) {
    const double den = (double)k * c + v;
    if (!(den > 0)) return NAN;
    if (a >= 1.0 - 1e-12) return (k + 1) / den;
    return (1.0 - pow(a, k + 1)) / ((1.0 - a) * den);
}

/* Load the pair and tokenize the prompts; the K list defaults to the config's K, else 4. */
static int ab_prepare(ab_ctx *a, char **prompts, int n_prompts, sd_error *err) {
    const bench_cli *c = a->c;
    sd_cli_pair *p = a->p;
    int rc = sd_cli_pair_load(&c->g, p, err);
    if (rc) return rc;
    a->e = p->engine;
    const int32_t ctx = sd_engine_n_ctx(a->e);
    const sd_vocab *vocab = sd_engine_vocab(a->e);
    a->n_ks = c->n_ks;
    memcpy(a->ks, c->ks, sizeof a->ks);
    if (a->n_ks == 0) {
        a->ks[0] = p->cfg.has_draft_tokens ? p->cfg.draft_tokens : 4;
        a->n_ks = 1;
    }
    a->n_prompts = n_prompts;
    a->prompt_ids = calloc((size_t)n_prompts, sizeof *a->prompt_ids);
    a->n_prompt_ids = calloc((size_t)n_prompts, sizeof *a->n_prompt_ids);
    a->out_a = malloc((size_t)p->ep.gen.n_predict * sizeof(int32_t));
    a->out_b = malloc((size_t)p->ep.gen.n_predict * sizeof(int32_t));
    if (!a->prompt_ids || !a->n_prompt_ids || !a->out_a || !a->out_b)
        return sd_errorf(err, SD_ERR_OOM, "bench: out of memory");
    for (int i = 0; i < n_prompts; i++) {
        sd_prompt_spec ps = {0};
        ps.text = prompts[i];
        ps.len = strlen(prompts[i]);
        ps.no_bos = c->g.no_bos;
        int32_t n = 0;
        if ((rc = sd_prompt_tokenize(vocab, &ps, &a->prompt_ids[i], &n, err))) return rc;
        if (n + 1 > ctx)
            return sd_errorf(err, SD_ERR_CONTEXT, "bench: prompt %d is %d tokens (context %d)", i,
                             (int)n, ctx);
        a->n_prompt_ids[i] = n;
        if (n > a->max_prompt) a->max_prompt = n;
    }
    return SD_OK;
}

/* Step costs c and v, measured before the runs on sessions of their own at position
 * n_prompt + n/2 (see the top of this file). */
static int ab_costs(ab_ctx *a, sd_error *err) {
    const sd_model *tm = sd_engine_target(a->e), *dm = sd_engine_draft(a->e);
    const int32_t n_vocab = sd_model_hparams(tm)->n_vocab;
    sd_session_params tsp = sd_engine_session_params(a->e, 0);
    sd_session_params dsp = sd_engine_session_params(a->e, 1);
    int32_t pos = a->n_prompt_ids[0] + a->p->ep.gen.n_predict / 2;
    if (pos + SD_MAX_DRAFT + 1 > dsp.n_ctx) pos = dsp.n_ctx - SD_MAX_DRAFT - 1;
    if (pos < 1) pos = 1;
    a->pos = pos;
    sd_session *ts = NULL, *ds = NULL;
    int32_t *fill = malloc((size_t)(pos + SD_MAX_DRAFT + 1) * sizeof *fill);
    float *logits = malloc((size_t)(SD_MAX_DRAFT + 1) * (size_t)n_vocab * sizeof(float));
    int rc = fill && logits ? SD_OK : sd_errorf(err, SD_ERR_OOM, "bench: out of memory");
    if (!rc) {
        bench_make_fill(fill, pos + SD_MAX_DRAFT + 1, a->prompt_ids[0], a->n_prompt_ids[0],
                        n_vocab);
        tsp.n_ctx = dsp.n_ctx = pos + SD_MAX_DRAFT + 1;
        tsp.n_batch = dsp.n_batch = SD_MAX_DRAFT + 1;
        rc = sd_session_init(tm, &tsp, &ts, err);
    }
    if (!rc) rc = sd_session_init(dm, &dsp, &ds, err);
    const int reps = (int)a->c->reps;
    if (!rc)
        sd_cli_progress(
            "specdec bench: timing decode steps and verification passes at position %d\n", pos);
    if (!rc) rc = bench_time_eval(ts, fill, pos, 1, reps, logits, &a->t_tstep, err);
    if (!rc) rc = bench_time_eval(ds, fill, pos, 1, reps, logits, &a->t_dstep, err);
    for (int ki = 0; ki < a->n_ks && !rc; ki++)
        rc = bench_time_eval(ts, fill, pos, a->ks[ki] + 1, reps, logits, &a->t_ver[ki], err);
    sd_session_free(ts);
    sd_session_free(ds);
    free(fill);
    free(logits);
    return rc;
}

/* What the runs of one K gather. */
typedef struct k_runs {
    side_acc sa, sb;   /* A (target alone) and B (speculative) */
    bench_dvec ratios; /* per-pair tok/s ratios B / A */
    int match;         /* every greedy B run emitted its A run's tokens */
} k_runs;

/* The ABAB runs of one K (ki-th of the list), each pair recorded in a->jruns. */
static int ab_k_runs(ab_ctx *a, int ki, k_runs *kr, sd_error *err) {
    const bench_cli *c = a->c;
    const sd_gen_params *g0 = &a->p->ep.gen;
    const int greedy = g0->samp.temp <= 0.0f;
    const int32_t k = a->ks[ki];
    sd_gen_stats st_a, st_b;
    int rc = SD_OK;
    kr->match = 1;
    for (int64_t r = 0; r < c->runs && !rc; r++) {
        const int pi = (int)(r % a->n_prompts);
        const uint64_t seed = g0->seed + (uint64_t)r;
        sd_cli_progress("specdec bench: K=%d run %lld/%lld (prompt %d)\n", k, (long long)r + 1,
                        (long long)c->runs, pi);
        if ((rc = one_run(a, pi, seed, 0, a->out_a, &kr->sa, &st_a, err))) break;
        if ((rc = one_run(a, pi, seed, k, a->out_b, &kr->sb, &st_b, err))) break;
        const double ta = sd_stats_tokens_per_s(&st_a), tb = sd_stats_tokens_per_s(&st_b);
        const double ratio = ta > 0 ? tb / ta : NAN;
        if (bench_dvec_push(&kr->ratios, ratio)) {
            rc = sd_errorf(err, SD_ERR_OOM, "bench: out of memory");
            break;
        }
        int match = st_a.n_generated == st_b.n_generated &&
                    !memcmp(a->out_a, a->out_b, (size_t)st_a.n_generated * sizeof(int32_t));
        if (greedy && !match) {
            kr->match = 0;
            fprintf(stderr,
                    "specdec bench: K=%d run %lld: speculative tokens differ from "
                    "target-alone tokens (greedy)\n",
                    k, (long long)r);
        }
        json_t *ra = run_record(k, r, pi, seed, "target", &st_a, 0);
        json_t *rb = run_record(k, r, pi, seed, "spec", &st_b, k);
        json_object_set_new(rb, "speedup", bench_jnum(ratio));
        json_object_set_new(rb, "greedy_match", greedy ? json_boolean(match) : json_null());
        json_array_append_new(a->jruns, ra);
        json_array_append_new(a->jruns, rb);
    }
    return rc;
}

/* "median [min,max]" of x[0 .. n) into buf. */
static void fmt_range(char *buf, size_t cap, const bench_dvec *x) {
    snprintf(buf, cap, "%.2f [%.2f,%.2f]", bench_quantile(x->v, x->n, 0.5), bench_min(x->v, x->n),
             bench_max(x->v, x->n));
}

/* "p50/p90" of x[0 .. n) into buf. */
static void fmt_pct(char *buf, size_t cap, const bench_dvec *x) {
    snprintf(buf, cap, "%.1f/%.1f", bench_quantile(x->v, x->n, 0.5),
             bench_quantile(x->v, x->n, 0.9));
}

/* The table row of one K (with its plausibility flag, the reasons on the next line)
 * and its summary record. */
static int ab_k_report(ab_ctx *a, int ki, const k_runs *kr, sd_error *err) {
    const int greedy = a->p->ep.gen.samp.temp <= 0.0f;
    const int32_t k = a->ks[ki];
    const side_acc *sa = &kr->sa, *sb = &kr->sb;
    const double cost_c = a->t_dstep / a->t_tstep;
    const double acc = sd_stats_acceptance_rate(&sb->sum);
    const double acc_pass =
        sb->sum.n_target_passes ? (double)sb->sum.n_accepted / sb->sum.n_target_passes : 0.0;
    const double v = a->t_ver[ki] / a->t_tstep;
    const double pred = predicted_speedup(acc, k, cost_c, v);
    const double sp_med = bench_quantile(kr->ratios.v, kr->ratios.n, 0.5);
    char why[512];
    const int suspect = bench_suspect(k, sp_med, pred, v, why, sizeof why);
    char ta[64], tb[64], tt[64], ti[64];
    fmt_range(ta, sizeof ta, &sa->tps);
    fmt_range(tb, sizeof tb, &sb->tps);
    fmt_pct(tt, sizeof tt, &sb->ttft);
    fmt_pct(ti, sizeof ti, &sb->itl);
    char ts[16] = "-"; /* acceptance: "-" when nothing was drafted */
    if (sb->sum.n_drafted) snprintf(ts, sizeof ts, "%.3f", acc);
    printf("%3d %22s %22s %7.3f %7.3f %6s %6.3f %6.3f %15s %15s %6.4f %5s %s\n", k, ta, tb, sp_med,
           pred, ts, acc_pass, v, tt, ti, cost_c, greedy ? (kr->match ? "yes" : "NO") : "-",
           suspect ? "YES" : "-");
    if (suspect) printf("    K=%d suspect: %s\n", k, why);
    errno = 0;
    if (fflush(stdout) != 0 || ferror(stdout))
        return sd_errorf(err, SD_ERR_IO, "stdout: write error: %s", strerror(errno ? errno : EIO));
    json_t *sum = json_pack(
        "{s:i,s:o,s:o,s:o,s:o,s:o,s:o,s:o,s:o,s:o,s:o,s:o,s:o,s:b,s:o}", "k", k, "target",
        side_json(sa, 0, k), "spec", side_json(sb, 1, k), "speedup",
        bench_jstats3(kr->ratios.v, kr->ratios.n), "predicted_speedup", bench_jnum(pred),
        "acceptance_rate", bench_jnum(acc), "mean_accepted_per_pass", bench_jnum(acc_pass), "c",
        bench_jnum(cost_c), "v", bench_jnum(v), "t_target_step_ms", bench_jnum(a->t_tstep),
        "t_draft_step_ms", bench_jnum(a->t_dstep), "t_verify_pass_ms", bench_jnum(a->t_ver[ki]),
        "greedy_match", greedy ? json_boolean(kr->match) : json_null(), "suspect", suspect,
        "suspect_reason", suspect ? json_string(why) : json_null());
    if (!sum) return sd_errorf(err, SD_ERR_OOM, "bench: cannot build JSON");
    json_array_append_new(a->jsum, sum);
    return SD_OK;
}

/* All runs of one K (ki-th of the list): a table row and a summary record. */
static int ab_one_k(ab_ctx *a, int ki, sd_error *err) {
    k_runs kr;
    memset(&kr, 0, sizeof kr);
    int rc = ab_k_runs(a, ki, &kr, err);
    if (!rc) {
        a->all_match &= kr.match;
        rc = ab_k_report(a, ki, &kr, err);
    }
    side_free(&kr.sa);
    side_free(&kr.sb);
    bench_dvec_free(&kr.ratios);
    return rc;
}

/* The whole JSON document of an A/B run. */
static json_t *ab_json(const ab_ctx *a) {
    const bench_cli *c = a->c;
    const sd_engine_params *ep = &a->p->ep;
    const sd_gen_params *g = &ep->gen;
    const int greedy = g->samp.temp <= 0.0f;
    const int threads = ep->n_threads;
    json_t *kl = json_array();
    for (int i = 0; i < a->n_ks; i++)
        json_array_append_new(kl, json_integer(a->ks[i]));
    return json_pack(
        "{s:s,s:s,s:s,s:I,s:I,s:{s:i,s:i,s:s},s:{s:i,s:f,s:i,s:f,s:I,s:I,s:i,s:o,s:i,s:I,"
        "s:I,s:i,s:s},s:{s:i,s:o,s:o,s:o},s:o,s:O,s:O}",
        "mode", "ab", "target", ep->target, "draft", ep->draft, "target_weight_bytes",
        (json_int_t)sd_model_weight_bytes(sd_engine_target(a->e)), "draft_weight_bytes",
        (json_int_t)sd_model_weight_bytes(sd_engine_draft(a->e)), "machine", "n_cores",
        sd_n_cores(), "threads", threads > 0 ? threads : sd_n_cores(), "kernels",
        sd_quant_kernels_name(), "params", "n_predict", g->n_predict, "temp", (double)g->samp.temp,
        "top_k", g->samp.top_k, "top_p", (double)g->samp.top_p, "seed", (json_int_t)g->seed, "runs",
        (json_int_t)c->runs, "n_prompts", a->n_prompts, "k_list", kl, "ctx", sd_engine_n_ctx(a->e),
        "warmup", (json_int_t)c->warmup, "reps", (json_int_t)c->reps, "max_prompt_tokens",
        a->max_prompt, "kv_type",
        a->p->kv_type ? a->p->kv_type : sd_type_name((uint32_t)a->p->ep.kv_type), "costs", "pos",
        a->pos, "t_target_step_ms", bench_jnum(a->t_tstep), "t_draft_step_ms",
        bench_jnum(a->t_dstep), "c", bench_jnum(a->t_dstep / a->t_tstep), "greedy_match",
        greedy ? json_boolean(a->all_match) : json_null(), "summary", a->jsum, "runs", a->jruns);
}

int bench_run_ab(const bench_cli *c, sd_cli_pair *p, char **prompts, int n_prompts, sd_error *err) {
    ab_ctx a = {0};
    a.c = c;
    a.p = p;
    a.all_match = 1;
    a.jruns = json_array();
    a.jsum = json_array();
    json_t *root = NULL;
    if (p->lookup_cache)
        fprintf(stderr, "specdec bench: ignoring --lookup-cache: every run starts from nothing\n");
    int rc = ab_prepare(&a, prompts, n_prompts, err);
    if (!rc) rc = ab_costs(&a, err);
    const sd_gen_params *g0 = &p->ep.gen;
    /* Warm-up pairs (not recorded). */
    for (int64_t w = 0; w < c->warmup && !rc; w++) {
        sd_cli_progress("specdec bench: warm-up %lld/%lld\n", (long long)w + 1,
                        (long long)c->warmup);
        sd_gen_stats st;
        const int pi = (int)(w % n_prompts);
        rc = one_run(&a, pi, g0->seed + (uint64_t)w, 0, a.out_a, NULL, &st, err);
        if (!rc) rc = one_run(&a, pi, g0->seed + (uint64_t)w, a.ks[0], a.out_b, NULL, &st, err);
    }
    if (!rc) {
        const int threads = p->ep.n_threads;
        printf("target %s (%.1f MiB), draft %s (%.1f MiB), %d threads, %s sampling, n = %d, "
               "%lld runs per K, %d prompts\n",
               p->ep.target, sd_model_weight_bytes(sd_engine_target(a.e)) / 1048576.0, p->ep.draft,
               sd_model_weight_bytes(sd_engine_draft(a.e)) / 1048576.0,
               threads > 0 ? threads : sd_n_cores(), g0->samp.temp <= 0.0f ? "greedy" : "random",
               g0->n_predict, (long long)c->runs, n_prompts);
        printf("step costs at position %d: target decode %.3f ms, draft decode %.3f ms (c = "
               "%.4f)\n",
               a.pos, a.t_tstep, a.t_dstep, a.t_dstep / a.t_tstep);
        printf("%3s %22s %22s %7s %7s %6s %6s %6s %15s %15s %6s %5s %s\n", "K", "target tok/s",
               "spec tok/s", "speedup", "predict", "accept", "acc/ps", "v", "TTFT p50/p90 ms",
               "ITL p50/p90 ms", "c", "match", "suspect");
    }
    for (int ki = 0; ki < a.n_ks && !rc; ki++)
        rc = ab_one_k(&a, ki, err);
    if (!rc) {
        if (g0->samp.temp <= 0.0f)
            printf("greedy speculative output %s target-alone output in every run\n",
                   a.all_match ? "equals" : "DIFFERS FROM");
        printf("speedup: median of per-pair tok/s ratios; predict: (1 - a^(K+1)) / ((1 - a)(K "
               "c + v)) with a = accept\n");
        printf("suspect: speedup above K + 1, v below %.2f, or speedup more than %.0fx off the "
               "prediction (a busy machine; rerun)\n",
               BENCH_V_MIN, BENCH_PRED_FACTOR);
    }
    if (!rc && c->json) {
        root = ab_json(&a);
        rc = root ? bench_write_json(root, c->json, err)
                  : sd_errorf(err, SD_ERR_OOM, "bench: cannot build JSON");
    }
    json_decref(root);
    json_decref(a.jsum);
    json_decref(a.jruns);
    if (a.prompt_ids)
        for (int i = 0; i < n_prompts; i++)
            free(a.prompt_ids[i]);
    free(a.prompt_ids);
    free(a.n_prompt_ids);
    free(a.out_a);
    free(a.out_b);
    return rc;
}
