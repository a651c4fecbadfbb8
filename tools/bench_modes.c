/*
 * specdec bench --draft-types LIST: draft types side by side on the same prompts.
 *
 *   specdec bench --config F --draft-types all -f scripts/prompts/rewrite.txt
 *                 -f scripts/prompts/stories.txt [-k K | --k-list L] [-n N] [--runs N]
 *                 [-t N] [--json FILE] [drafting flags]
 * Types: none (target alone), llm (the draft model, fixed K, no cut-off), llm-adaptive
 * (K chosen each pass, auto-off, --draft-p-min cut-off), ngram and ngram-adaptive
 * (prompt lookup, no draft model needed), ngram+llm and ngram+llm-adaptive (the lookup's
 * match continued by the draft model in the same block; the draft model alone without a
 * match), suffix and suffix-adaptive (the suffix proposer: longest match, most frequent
 * continuation; no draft model needed), suffix+llm and suffix+llm-adaptive (chained as
 * ngram+llm). "all": every type
 * the pair allows. Fixed types run once per K of --k-list (or -k; default the config's K, else 4);
 * adaptive ones with K at most the largest K.
 * For each prompt file (its category: the "# category: NAME" first line, else the
 * file name), for each of its first --runs prompts (default all; run i uses seed S + i),
 * every variant runs in turn (none first; with --rounds N, N times, every other round in
 * reverse order, the rates pooled per prompt), all through sd_engine_generate with both
 * caches emptied first; greedy by default, and each run's tokens must equal the none
 * run's ("match"). Prompts of a file whose category is "chat" or "chat-NAME" are user
 * messages in the target's chat template (tokenizer.chat_template, as generate --chat),
 * when it has one; -e processes escapes (\n) in the prompt lines.
 * Table rows per (category, variant), then over all categories:
 *   tok/s     emitted tokens / decode time (wall clock, prefill excluded), median
 *   cpu tok/s tokens after the first pass / process CPU time from the first to the
 *             last pass, median: on a shared machine this counts the work, not the
 *             waiting (use it with -t 1 and OMP_WAIT_POLICY=passive)
 *   speedup   median over prompts of the per-prompt ratio to none (wall; cpu)
 *   accept    accepted / drafted; tok/ps: emitted / target passes; dr/ps: drafted /
 *             target passes; K: mean K chosen over passes (0: target alone; an n-gram
 *             without a match drafts nothing for its K); off: passes with speculation
 *             switched off
 * Token trees (docs/drafting.md), not in "all": suffix-tree1, suffix-tree2,
 * suffix-tree4, ngram-tree2 and ngram-tree4 draft trees of width 1, 2 or 4 and depth K
 * (capped at 16 / width).
 */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tools/bench.h"
#include "runtime/engine/sd_engine.h"
#include "runtime/tokenizer/sd_vocab.h"

typedef struct mode_def {
    const char *name;
    sd_draft_type type;
    sd_k_policy policy;
    int32_t tree; /* token trees of this width (sd_gen_params.tree_width), 0: a chain */
} mode_def;

static const mode_def k_modes[] = {
    {"none", SD_DRAFT_NONE, SD_K_FIXED, 0},
    {"llm", SD_DRAFT_LLM, SD_K_FIXED, 0},
    {"llm-adaptive", SD_DRAFT_LLM, SD_K_ADAPTIVE, 0},
    {"ngram", SD_DRAFT_NGRAM, SD_K_FIXED, 0},
    {"ngram-adaptive", SD_DRAFT_NGRAM, SD_K_ADAPTIVE, 0},
    {"ngram+llm", SD_DRAFT_NGRAM_LLM, SD_K_FIXED, 0},
    {"ngram+llm-adaptive", SD_DRAFT_NGRAM_LLM, SD_K_ADAPTIVE, 0},
    {"suffix", SD_DRAFT_SUFFIX, SD_K_FIXED, 0},
    {"suffix-adaptive", SD_DRAFT_SUFFIX, SD_K_ADAPTIVE, 0},
    {"suffix+llm", SD_DRAFT_SUFFIX_LLM, SD_K_FIXED, 0},
    {"suffix+llm-adaptive", SD_DRAFT_SUFFIX_LLM, SD_K_ADAPTIVE, 0},
    /* token trees, W x K (K capped to 16 / W); not in "all" */
    {"suffix-tree1", SD_DRAFT_SUFFIX, SD_K_FIXED, 1},
    {"suffix-tree2", SD_DRAFT_SUFFIX, SD_K_FIXED, 2},
    {"suffix-tree4", SD_DRAFT_SUFFIX, SD_K_FIXED, 4},
    {"ngram-tree2", SD_DRAFT_NGRAM, SD_K_FIXED, 2},
    {"ngram-tree4", SD_DRAFT_NGRAM, SD_K_FIXED, 4},
};
#define N_MODE_DEFS  ((int)(sizeof k_modes / sizeof k_modes[0]))
#define MODE_ALL     (-1)
#define MAX_VARIANTS (N_MODE_DEFS * MAX_KS)

int bench_parse_modes(const char *list, bench_cli *c) {
    char buf[512];
    c->n_modes = 0;
    if (strlen(list) >= sizeof buf) {
        bench_usage("--draft-types: list too long: '%.60s...'", list);
        return -1;
    }
    strcpy(buf, list);
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok;
         tok = strtok_r(NULL, ",", &save)) {
        int m = -2;
        if (!strcmp(tok, "all")) m = MODE_ALL;
        for (int i = 0; i < N_MODE_DEFS; i++)
            if (!strcmp(tok, k_modes[i].name)) m = i;
        if (m == -2) {
            bench_usage("--draft-types: unknown type '%s' (known: none, llm, llm-adaptive, "
                        "ngram, ngram-adaptive, ngram+llm, ngram+llm-adaptive, suffix, "
                        "suffix-adaptive, suffix+llm, suffix+llm-adaptive, suffix-tree1, "
                        "suffix-tree2, suffix-tree4, "
                        "ngram-tree2, ngram-tree4, all)",
                        tok);
            return -1;
        }
        for (int i = 0; i < c->n_modes; i++)
            if (c->modes[i] == m) m = -3; /* a repeat */
        if (m == -3) continue;
        if (c->n_modes >= MAX_MODES) {
            bench_usage("--draft-types: too many types in '%s'", list);
            return -1;
        }
        c->modes[c->n_modes++] = m;
    }
    if (c->n_modes == 0) {
        bench_usage("--draft-types: expected a comma-separated list, found '%s'", list);
        return -1;
    }
    return 0;
}

static double cpu_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

/* A variant: a type with its policy and K. */
typedef struct variant {
    int mode; /* index into k_modes */
    int32_t k;
    char label[48];
} variant;

typedef struct cell { /* one (category, variant) */
    bench_dvec tps, cpu_tps, speedup, cpu_speedup;
    int64_t n_runs;
    sd_gen_stats sum; /* the runs' statistics added up (sd_stats_add) */
    int match;
} cell;

static void cell_free(cell *c) {
    bench_dvec_free(&c->tps);
    bench_dvec_free(&c->cpu_tps);
    bench_dvec_free(&c->speedup);
    bench_dvec_free(&c->cpu_speedup);
}

typedef struct cpu_rec {
    double first; /* CPU ms at the first emitted block */
    int32_t n_first;
} cpu_rec;

static int cpu_cb(void *user, const int32_t *tokens, int32_t n) {
    (void)tokens;
    cpu_rec *r = user;
    if (r->n_first == 0) {
        r->first = cpu_ms();
        r->n_first = n;
    }
    return 0;
}

typedef struct modes_ctx {
    const bench_cli *c;
    sd_cli_pair *p;
    sd_engine *e;
    variant vars[MAX_VARIANTS];
    int n_vars;
    int greedy;
    int checked; /* greedy or Gumbel sampling: every variant must print none's text */
    float p_min_adaptive;
    int32_t draft_min_adaptive;
    int32_t *out, *ref;
    json_t *jruns, *jrows;
    /* one prompt's runs, per variant, added up over the rounds */
    sd_gen_stats acc[MAX_VARIANTS];
    double cpu_tok[MAX_VARIANTS], cpu_ms[MAX_VARIANTS];
    int ok[MAX_VARIANTS];
} modes_ctx;

/* One run of variant v on prompt ids; fills st, and *cpu_tok / *cpu_ms: the tokens after
 * the first emitted block and the process CPU ms they took (both 0 when the run is too
 * short to tell). */
static int run_one(modes_ctx *m, const variant *v, const int32_t *ids, int32_t n_ids, uint64_t seed,
                   int32_t *out, sd_gen_stats *st, double *cpu_tok, double *cpu_ms_out,
                   sd_error *err) {
    const mode_def *md = &k_modes[v->mode];
    sd_gen_params gp = m->p->ep.gen;
    gp.seed = seed;
    gp.draft_type = md->type;
    gp.k_policy = md->policy;
    gp.n_draft = md->type == SD_DRAFT_NONE ? 0 : v->k;
    gp.tree_width = md->tree;
    if (md->policy == SD_K_ADAPTIVE) {
        gp.draft_p_min = m->p_min_adaptive;
        gp.draft_min = m->draft_min_adaptive;
    } else if (!m->c->g.has_p_min && !m->p->cfg.has_draft_p_min) {
        gp.draft_p_min = 0.0f; /* fixed: K every pass unless a cut-off was asked for */
    }
    /* Empty the cache: each run prefills its prompt from scratch (the one-slot batcher's
     * prefix cache). */
    sd_engine_clear_cache(m->e);
    cpu_rec rec = {0, 0};
    int rc = sd_engine_generate(m->e, &gp, ids, n_ids, cpu_cb, &rec, out, gp.n_predict, st, err);
    const double t_end = cpu_ms();
    const int ok = rec.n_first && t_end > rec.first && st->n_generated > rec.n_first;
    *cpu_tok = ok ? (double)(st->n_generated - rec.n_first) : 0.0;
    *cpu_ms_out = ok ? t_end - rec.first : 0.0;
    return rc;
}

static void cell_add(cell *c, const sd_gen_stats *st, double tps, double cpu_tps, double sp,
                     double cpu_sp, int match) {
    int e = bench_dvec_push(&c->tps, tps) | bench_dvec_push(&c->cpu_tps, cpu_tps) |
            bench_dvec_push(&c->speedup, sp) | bench_dvec_push(&c->cpu_speedup, cpu_sp);
    (void)e; /* an OOM here only shortens a statistic */
    c->n_runs++;
    sd_stats_add(&c->sum, st);
    c->match &= match;
}

static double med(const bench_dvec *d) {
    /* NaN entries (a run too short for a CPU rate) are left out. */
    double *x = malloc((d->n ? d->n : 1) * sizeof *x);
    size_t n = 0;
    for (size_t i = 0; x && i < d->n; i++)
        if (isfinite(d->v[i])) x[n++] = d->v[i];
    const double q = n ? bench_quantile(x, n, 0.5) : NAN;
    free(x);
    return q;
}

/* Column widths: the longest label ("ngram+llm-adaptive K<=16") and category
 * ("chat-code") fit, so no row shifts its columns. */
#define W_CAT   10
#define W_LABEL 25

static void print_header(void) {
    printf("%-*s %-*s %9s %9s %7s %7s %6s %6s %5s %5s %7s %5s %s\n", W_CAT, "category", W_LABEL,
           "draft", "tok/s", "cpu tok/s", "speedup", "cpu sp", "accept", "tok/ps", "dr/ps", "K",
           "c ms", "off", "match");
}

/* "0.123" into buf, or "-" when the denominator is 0. */
static const char *ratio(double num, double den, const char *fmt, char *buf, size_t cap) {
    if (!(den > 0.0)) return "-";
    snprintf(buf, cap, fmt, num / den);
    return buf;
}

static void print_row(const char *cat, const variant *v, const cell *c, int checked) {
    const sd_gen_stats *s = &c->sum;
    int64_t kn = 0, ks = 0;
    for (int k = 0; k <= SD_MAX_DRAFT; k++) {
        kn += s->k_hist[k];
        ks += (int64_t)k * s->k_hist[k];
    }
    char a[16], t[16], d[16], k[16], cm[16];
    printf("%-*s %-*s %9.1f %9.1f %7.3f %7.3f %6s %6s %5s %5s %7s %4.0f%% %s\n", W_CAT, cat,
           W_LABEL, v->label, med(&c->tps), med(&c->cpu_tps), med(&c->speedup),
           med(&c->cpu_speedup), ratio(s->n_accepted, s->n_drafted, "%.3f", a, sizeof a),
           ratio(s->n_generated + s->n_stop_tokens, s->n_target_passes, "%.3f", t, sizeof t),
           ratio(s->n_drafted, s->n_target_passes, "%.2f", d, sizeof d),
           ratio(ks, kn, "%.2f", k, sizeof k),
           ratio(s->t_draft_ms, s->n_drafted, "%.3f", cm, sizeof cm),
           s->n_target_passes ? 100.0 * s->n_off_passes / s->n_target_passes : 0.0,
           checked ? (c->match ? "yes" : "NO") : "-");
    fflush(stdout);
}

static json_t *row_json(const char *cat, const variant *v, const cell *c) {
    const sd_gen_stats *s = &c->sum;
    json_t *hist = json_array(), *pp = json_array();
    for (int k = 0; k <= SD_MAX_DRAFT; k++)
        json_array_append_new(hist, json_integer(s->k_hist[k]));
    for (int i = 0; i < v->k; i++)
        json_array_append_new(pp, bench_jnum(sd_stats_accept_at(s, i)));
    const mode_def *md = &k_modes[v->mode];
    return json_pack(
        "{s:s,s:s,s:s,s:s,s:i,s:I,s:o,s:o,s:o,s:o,s:I,s:I,s:I,s:I,s:o,s:o,s:o,s:o,s:I,s:o,s:o}",
        "category", cat, "draft", v->label, "draft_type", sd_draft_type_name(md->type), "policy",
        sd_k_policy_name(md->policy), "k", v->k, "n_runs", (json_int_t)c->n_runs, "tokens_per_s",
        bench_jstats3(c->tps.v, c->tps.n), "cpu_tokens_per_s", bench_jnum(med(&c->cpu_tps)),
        "speedup", bench_jstats3(c->speedup.v, c->speedup.n), "cpu_speedup",
        bench_jnum(med(&c->cpu_speedup)), "n_generated", (json_int_t)s->n_generated,
        "n_target_passes", (json_int_t)s->n_target_passes, "n_drafted", (json_int_t)s->n_drafted,
        "n_accepted", (json_int_t)s->n_accepted, "acceptance_rate",
        bench_jnum(sd_stats_acceptance_rate(s)), "tokens_per_pass",
        bench_jnum(sd_stats_tokens_per_pass(s)), "k_hist", hist, "per_position_acceptance", pp,
        "n_off_passes", (json_int_t)s->n_off_passes, "t_off_ms", bench_jnum(s->t_off_ms),
        "greedy_match", json_boolean(c->match));
}

/* The variants: fixed types per K, adaptive ones with the largest K. */
static int make_variants(modes_ctx *m, sd_error *err) {
    const bench_cli *c = m->c;
    int32_t ks[MAX_KS];
    int n_ks = c->n_ks;
    memcpy(ks, c->ks, sizeof ks);
    if (n_ks == 0) {
        ks[0] = m->p->cfg.has_draft_tokens ? m->p->cfg.draft_tokens : 4;
        n_ks = 1;
    }
    int32_t k_top = ks[0];
    for (int i = 1; i < n_ks; i++)
        if (ks[i] > k_top) k_top = ks[i];
    int want[N_MODE_DEFS] = {0};
    const int has_llm = sd_engine_has_proposer(m->e, SD_DRAFT_LLM);
    for (int i = 0; i < c->n_modes; i++) {
        if (c->modes[i] == MODE_ALL) {
            for (int j = 0; j < N_MODE_DEFS; j++)
                want[j] |=
                    k_modes[j].tree == 0 && (has_llm || !sd_draft_type_uses_llm(k_modes[j].type));
        } else {
            const mode_def *md = &k_modes[c->modes[i]];
            if (!has_llm && sd_draft_type_uses_llm(md->type))
                return sd_errorf(err, SD_ERR_ARG,
                                 "bench: --draft-types %s needs a draft model (--draft FILE)",
                                 md->name);
            want[c->modes[i]] = 1;
        }
    }
    want[0] = 1; /* none: the reference of every speedup and match */
    m->n_vars = 0;
    for (int j = 0; j < N_MODE_DEFS; j++) {
        if (!want[j]) continue;
        const int per_k = j != 0 && k_modes[j].policy == SD_K_FIXED;
        for (int i = 0; i < (per_k ? n_ks : 1); i++) {
            variant *v = &m->vars[m->n_vars++];
            v->mode = j;
            v->k = j == 0 ? 0 : (per_k ? ks[i] : k_top);
            if (k_modes[j].tree > 0 && v->k * k_modes[j].tree > SD_MAX_DRAFT)
                v->k = SD_MAX_DRAFT / k_modes[j].tree;
            if (j == 0)
                snprintf(v->label, sizeof v->label, "none");
            else
                snprintf(v->label, sizeof v->label, "%s K%s%d", k_modes[j].name,
                         per_k ? "=" : "<=", v->k);
        }
    }
    return SD_OK;
}

/* {"prompt": [ids], "output": [ids]} (NULL on OOM: the record goes without). */
static json_t *ids_json(const int32_t *prompt, int32_t n_prompt, const int32_t *out,
                        int32_t n_out) {
    json_t *o = json_object(), *a = json_array(), *b = json_array();
    for (int32_t i = 0; a && i < n_prompt; i++)
        json_array_append_new(a, json_integer(prompt[i]));
    for (int32_t i = 0; b && i < n_out; i++)
        json_array_append_new(b, json_integer(out[i]));
    if (o && a && b) {
        json_object_set_new(o, "prompt", a);
        json_object_set_new(o, "output", b);
        return o;
    }
    json_decref(o);
    json_decref(a);
    json_decref(b);
    return NULL;
}

/* All prompts of one file: every variant per prompt; cells[v] accumulate, and all[v]. */
static int run_file(modes_ctx *m, const char *path, cell *all, sd_error *err) {
    const bench_cli *c = m->c;
    char **prompts = NULL, *cat = NULL;
    int n_prompts = 0;
    int rc = bench_read_prompts(path, &prompts, &n_prompts, &cat, err);
    if (rc) return rc;
    for (int i = 0; c->g.escape && i < n_prompts; i++) /* -e: \n in a prompt line */
        sd_cli_unescape(prompts[i], strlen(prompts[i]));
    cell cells[MAX_VARIANTS];
    memset(cells, 0, sizeof cells);
    for (int v = 0; v < m->n_vars; v++)
        cells[v].match = 1;
    const int runs = c->has_runs ? (int)c->runs : n_prompts;
    const sd_vocab *vocab = sd_engine_vocab(m->e);
    const int add_bos = !c->g.no_bos && sd_vocab_add_bos(vocab);
    for (int r = 0; r < runs && !rc; r++) {
        const int pi = r % n_prompts;
        int32_t *ids = NULL;
        size_t n_ids = 0;
        /* A "chat" file (category chat, or chat-NAME) holds user messages: formatted with
         * the model's chat template, as generate --chat does (raw, a chat model often ends
         * its turn at once). */
        const int is_chat = !strcmp(cat, "chat") || !strncmp(cat, "chat-", 5);
        const sd_chat_msg msg = {"user", prompts[pi]};
        sd_prompt_spec ps = {0};
        ps.no_bos = !add_bos;
        if (is_chat && sd_vocab_chat_template(vocab)) { /* the engine's one prompt path */
            ps.messages = &msg;
            ps.n_messages = 1;
        } else {
            ps.text = prompts[pi];
            ps.len = strlen(prompts[pi]);
        }
        int32_t n32 = 0;
        rc = sd_prompt_tokenize(vocab, &ps, &ids, &n32, err);
        if (rc && ps.messages)
            sd_error_prefix(err, rc, "%s", sd_model_path(sd_engine_target(m->e)));
        n_ids = (size_t)n32;
        if (!rc && (n_ids == 0 || n_ids + 2 > (size_t)sd_engine_n_ctx(m->e)))
            rc = sd_errorf(err, SD_ERR_CONTEXT, "%s: prompt %d is %zu tokens (context %d)", path,
                           pi + 1, n_ids, sd_engine_n_ctx(m->e));
        const uint64_t seed = m->p->ep.gen.seed + (uint64_t)r;
        fprintf(stderr, "specdec bench: %s prompt %d/%d (%zu tokens)\n", cat, r + 1, runs, n_ids);
        /* Every variant rounds times, each round in turn, every other one in reverse order
         * (none first, then last: A B .. B A), so a load that drifts during the prompt's
         * runs weighs on every variant alike; the rates are pooled over the rounds. The
         * first round's none run is the reference of every match. */
        const int rounds = c->rounds > 1 ? (int)c->rounds : 1;
        double base_tps = NAN;
        int32_t n_ref = 0;
        for (int v = 0; v < m->n_vars; v++) {
            memset(&m->acc[v], 0, sizeof m->acc[v]);
            m->cpu_tok[v] = m->cpu_ms[v] = 0.0;
            m->ok[v] = 1;
        }
        for (int rd = 0; rd < rounds && !rc; rd++)
            for (int j = 0; j < m->n_vars && !rc; j++) {
                const int v = rd % 2 ? m->n_vars - 1 - j : j;
                const int is_ref = rd == 0 && v == 0;
                sd_gen_stats st;
                double ctok = 0.0, cms = 0.0;
                int32_t *out = is_ref ? m->ref : m->out;
                rc = run_one(m, &m->vars[v], ids, (int32_t)n_ids, seed, out, &st, &ctok, &cms, err);
                if (rc) break;
                const double tps = sd_stats_tokens_per_s(&st);
                if (is_ref) {
                    base_tps = tps;
                    n_ref = st.n_generated;
                }
                const int match = st.n_generated == n_ref &&
                                  !memcmp(out, m->ref, (size_t)n_ref * sizeof(int32_t));
                if (m->checked && !match)
                    fprintf(stderr, "specdec bench: %s prompt %d %s: tokens differ from none\n",
                            cat, pi + 1, m->vars[v].label);
                sd_stats_add(&m->acc[v], &st);
                m->cpu_tok[v] += ctok;
                m->cpu_ms[v] += cms;
                m->ok[v] &= !m->checked || match;
                const double sp = base_tps > 0 ? tps / base_tps : NAN;
                json_t *rec = json_pack(
                    "{s:s,s:s,s:i,s:i,s:I,s:i,s:i,s:i,s:i,s:i,s:o,s:o,s:o,s:o,s:o,s:i,s:o}",
                    "category", cat, "draft", m->vars[v].label, "prompt_index", pi, "round", rd,
                    "seed", (json_int_t)seed, "n_prompt", st.n_prompt, "n_generated",
                    st.n_generated, "n_target_passes", st.n_target_passes, "n_drafted",
                    st.n_drafted, "n_accepted", st.n_accepted, "tokens_per_s", bench_jnum(tps),
                    "cpu_tokens_per_s", bench_jnum(cms > 0.0 ? ctok / (cms * 1e-3) : NAN),
                    "speedup", bench_jnum(sp), "mean_k", bench_jnum(sd_stats_mean_k(&st)),
                    "t_off_ms", bench_jnum(st.t_off_ms), "n_off_passes", st.n_off_passes,
                    "greedy_match", m->checked ? json_boolean(match) : json_null());
                if (rec && is_ref) /* the reference's ids: replayable offline (tokens per pass
                                    * of any greedy drafter follow from them alone) */
                    json_object_set_new(rec, "ids", ids_json(ids, (int32_t)n_ids, out, n_ref));
                if (rec) json_array_append_new(m->jruns, rec);
            }
        /* One entry per prompt and variant: its rates pooled over the rounds, against none's. */
        const double none_tps = sd_stats_tokens_per_s(&m->acc[0]);
        const double none_cpu = m->cpu_ms[0] > 0.0 ? m->cpu_tok[0] / (m->cpu_ms[0] * 1e-3) : NAN;
        for (int v = 0; v < m->n_vars && !rc; v++) {
            const double tps = sd_stats_tokens_per_s(&m->acc[v]);
            const double cpu_tps = m->cpu_ms[v] > 0.0 ? m->cpu_tok[v] / (m->cpu_ms[v] * 1e-3) : NAN;
            const double sp = none_tps > 0 ? tps / none_tps : NAN;
            const double cpu_sp = none_cpu > 0 ? cpu_tps / none_cpu : NAN;
            cell_add(&cells[v], &m->acc[v], tps, cpu_tps, sp, cpu_sp, m->ok[v]);
            cell_add(&all[v], &m->acc[v], tps, cpu_tps, sp, cpu_sp, m->ok[v]);
        }
        free(ids);
    }
    if (!rc)
        for (int v = 0; v < m->n_vars; v++) {
            print_row(cat, &m->vars[v], &cells[v], m->checked);
            json_t *row = row_json(cat, &m->vars[v], &cells[v]);
            if (row) json_array_append_new(m->jrows, row);
        }
    for (int v = 0; v < m->n_vars; v++)
        cell_free(&cells[v]);
    bench_free_prompts(prompts, n_prompts);
    free(cat);
    return rc;
}

int bench_run_modes(const bench_cli *c, sd_cli_pair *p, sd_error *err) {
    modes_ctx m;
    memset(&m, 0, sizeof m);
    m.c = c;
    m.p = p;
    m.greedy = p->ep.gen.samp.temp <= 0.0f;
    m.checked = m.greedy || p->ep.gen.samp.spec == SD_SPEC_GUMBEL;
    m.p_min_adaptive = c->g.has_p_min || p->cfg.has_draft_p_min ? p->ep.gen.draft_p_min : 0.75f;
    m.draft_min_adaptive = c->g.has_draft_min || p->cfg.has_draft_min ? p->ep.gen.draft_min : 1;
    if (c->n_prompt_files == 0 && !c->g.prompt)
        return sd_errorf(err, SD_ERR_ARG,
                         "bench --draft-types: give prompt files (-f FILE, repeatable)");
    if (p->lookup_cache)
        fprintf(stderr, "specdec bench: ignoring --lookup-cache: every run starts from nothing\n");
    int rc = sd_cli_pair_load(&c->g, p, err);
    if (rc) return rc;
    m.e = p->engine;
    if ((rc = make_variants(&m, err))) return rc;
    m.out = malloc((size_t)p->ep.gen.n_predict * sizeof(int32_t));
    m.ref = malloc((size_t)p->ep.gen.n_predict * sizeof(int32_t));
    m.jruns = json_array();
    m.jrows = json_array();
    cell all[MAX_VARIANTS];
    memset(all, 0, sizeof all);
    for (int v = 0; v < m.n_vars; v++)
        all[v].match = 1;
    if (!m.out || !m.ref) rc = sd_errorf(err, SD_ERR_OOM, "bench: out of memory");
    const int threads = p->ep.n_threads > 0 ? p->ep.n_threads : sd_n_cores();
    if (!rc) {
        printf("target %s, draft %s%s%s, %d threads, %s, n = %d, K %s, p-min %.2f (adaptive "
               "types), %d round%s a prompt\n",
               p->ep.target, p->ep.draft ? p->ep.draft : "(none)",
               p->ep.draft_head ? ", head " : "", p->ep.draft_head ? p->ep.draft_head : "", threads,
               m.greedy ? "greedy"
                        : (p->ep.gen.samp.spec == SD_SPEC_GUMBEL ? "Gumbel sampling"
                                                                 : "rejection sampling"),
               p->ep.gen.n_predict, c->n_ks > 1 ? "per --k-list" : "as labelled",
               (double)m.p_min_adaptive, (int)(c->rounds > 1 ? c->rounds : 1),
               c->rounds > 1 ? "s" : "");
        print_header();
    }
    for (int f = 0; f < c->n_prompt_files && !rc; f++)
        rc = run_file(&m, c->prompt_files[f], all, err);
    if (!rc && c->n_prompt_files > 1)
        for (int v = 0; v < m.n_vars; v++) {
            print_row("all", &m.vars[v], &all[v], m.checked);
            json_t *row = row_json("all", &m.vars[v], &all[v]);
            if (row) json_array_append_new(m.jrows, row);
        }
    if (!rc) {
        int all_match = 1;
        for (int v = 0; v < m.n_vars; v++)
            all_match &= all[v].match;
        if (m.checked)
            printf("%s output of every draft type %s target-alone output in every run\n",
                   m.greedy ? "greedy" : "Gumbel-sampled", all_match ? "equals" : "DIFFERS FROM");
        printf("speedup: median of per-prompt ratios to none (wall clock; cpu: process CPU "
               "time); tok/ps: tokens (the stop token included) per target pass; dr/ps: tokens "
               "drafted per pass; K: mean K drafted per pass; c ms: drafting ms per drafted "
               "token; off: passes with speculation switched off\n");
        if (c->json) {
            json_t *files = json_array();
            for (int f = 0; f < c->n_prompt_files; f++)
                json_array_append_new(files, json_string(c->prompt_files[f]));
            json_t *root = json_pack(
                "{s:s,s:s,s:s?,s:i,s:i,s:i,s:b,s:f,s:o,s:b,s:O,s:O}", "mode", "draft_types",
                "target", p->ep.target, "draft", p->ep.draft, "threads", threads, "n_predict",
                p->ep.gen.n_predict, "rounds", (int)(c->rounds > 1 ? c->rounds : 1), "greedy",
                m.greedy, "p_min_adaptive", (double)m.p_min_adaptive, "prompt_files", files,
                "greedy_match", all_match, "rows", m.jrows, "runs", m.jruns);
            rc = root ? bench_write_json(root, c->json, err)
                      : sd_errorf(err, SD_ERR_OOM, "bench: cannot build JSON");
            json_decref(root);
        }
    }
    for (int v = 0; v < m.n_vars; v++)
        cell_free(&all[v]);
    json_decref(m.jruns);
    json_decref(m.jrows);
    free(m.out);
    free(m.ref);
    return rc;
}
