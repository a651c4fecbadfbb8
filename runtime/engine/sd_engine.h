/*
 * runtime/engine: the library's top, the face a CLI, a server or a binding uses.
 *   - sd_engine (engine.c): loads a target and (optionally) a draft, checks that they
 *     pair (vocabulary, runtime/tokenizer's sd_vocab_check_pair), resolves the context
 *     sizes (the target's training context by default; the draft's context capped at
 *     its own), and makes the single-sequence scorer and proposers (for the tools that
 *     drive a model directly: bench --kernels, perplexity, compare);
 *   - sd_engine_generate (gen_entry.c): one sequence through the batcher's step
 *     (gen_batch.c, batch_step.c, step.c), the step `specdec serve` runs;
 *   - gen_stats.c: a generation's defaults and its statistics.
 * Owns the models, sessions and proposer of an engine. May include every library part
 * (never the CLI).
 *
 * The speculative step:
 *   tokenizer -> draft (propose K) -> target (one verification pass, K + 1 rows)
 *   -> verify (accept a prefix + one correction/bonus) -> commit -> detokenize.
 * With no proposer it is plain target-alone decoding through the same step (the A side
 * of an A/B run), so both sides share every kernel.
 *
 * The statistics (sd_gen_stats, one definition for generate, --json, bench, and a
 * batcher request's statistics, with the sd_stats_* figures) are defined, with their
 * meaning, in the public face, include/specdec.h, which wraps this engine for programs
 * (runtime/engine/face.c: sd_context, sd_complete, sd_queue). The draft length of
 * the last steps is capped so that a step never emits more than the n_predict budget left.
 */
#ifndef SD_ENGINE_H
#define SD_ENGINE_H

#include <stdint.h>

#include "draft/sd_draft.h"
#include "include/specdec.h"
#include "kv/sd_kv.h"
#include "runtime/base/sd_base.h"
#include "runtime/grammar/sd_grammar.h"
#include "runtime/tokenizer/sd_vocab.h"
#include "target/sd_target.h"
#include "verify/sd_verify.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SD_MAX_STOP_IDS 16

/* ---- adaptive draft length (adaptive.c) ---- */

/*
 * The controller that picks the draft length K before each verification pass, and
 * switches speculation off (target-alone passes) while it does not pay.
 *
 * Model (Leviathan et al. 2023, "Fast Inference from Transformers via Speculative
 * Decoding", eq. 1 and Thm 3.8, generalised from one acceptance rate alpha to one per
 * draft position). With a_i = P(draft token i accepted | tokens 1 .. i-1 accepted), a
 * pass that drafts K tokens emits on average
 *     E(K) = 1 + sum_{k=1..K} prod_{i<=k} a_i   tokens
 * (constant a_i = alpha: (1 - alpha^(K+1)) / (1 - alpha)) and costs
 *     T(K) = K c + v(K + 1)
 * with c the draft's cost per drafted token and v(n) the cost of a target pass over n
 * rows (verification, warps and sampling included); plain decoding emits 1 token per
 * v(1). The controller picks
 *     K* = argmax_{1 <= K <= k_max} E(K) / T(K)   (ties: the smaller K),
 * whose predicted speedup is S(K*) = E(K*) v(1) / T(K*).
 *
 * Acceptance: decayed counts (factor `decay` per pass, plain passes included, so old
 * evidence fades with time): a_i = (s_i + w0 a_{i-1}) / (n_i + w0), s_i and n_i the
 * decayed accepted and reached counts of position i, a_0 = prior_accept,
 * w0 = prior_weight (an unexplored position inherits its predecessor's estimate).
 *
 * Costs, in steady state and free of slow changes of the machine's load. Every timing x
 * of a kind s (the draft's per-token cost, or a pass of n rows) is read as
 * x = cost(s) L(t): a cost of the kind times a load factor of the moment, which a busy
 * neighbour or a shared core raises for draft and target alike and which therefore
 * cancels in S(K). Over the last 16 timings:
 *   log L(t) = the median of log x - log median(s), any kinds (robust: a spike does
 *              not move it);
 *   cost(s)  = the mean of x / L(t) of kind s, each term at most 100x the kind's median
 *              (what throughput pays: on a shared CPU the spikes are part of the cost,
 *              and their rate depends on the K, e.g. a thread pool woken after the
 *              draft's step waits for a core more often than one kept busy);
 * so draft and target timings taken under different loads still compare at one load,
 * and the first timing of each kind (cold caches, first touch of a buffer) is left out.
 * A size with fewer than min_samples timings kept costs the smaller of its mean and the
 * model of the other
 * sizes, so a K is tried again until one unlucky timing cannot rule it out. The model:
 * between two measured sizes the line between them; above the largest measured size m,
 * v(m) + s (n - m) with s the smallest slope between consecutive measured sizes, at
 * most s0 v(1), s0 = 0.25 (verification costs are concave in n, the first extra row the
 * dearest: a line through v(1) and v(2) alone would rule out long drafts untried);
 * below the smallest, the prior slope s0 (before anything, v(n) = 1 + s0 (n - 1)); c
 * before it is measured: 0.1 v(1).
 * Calibration: `calibrate` plain passes at the start (two, then every other pass until
 * they are done, so draft and target are timed at the same moments), and then one pass
 * in every `recalibrate`
 * while speculating (every recalibrate / 8 while S(K*) < 1.25, where the decision
 * hangs on v(1) and a plain pass costs at most 20% of a pass; / 4 while S < 2), are
 * plain passes (K = 0) that measure v(1).
 *
 * Auto-off (when auto_off): once every cost S(K*) uses has been measured at least
 * `min_samples` times, `off_after` drafting passes in a row with S(K*) < off_margin
 * switch speculation off: K = 0 (target alone) for `backoff` passes, then a probe of
 * `probe_passes` passes drafting the K* of optimistic estimates max(a_i, prior_accept)
 * (a probe pass that drafts nothing, an n-gram without a match, is repeated, up to 8
 * times; a probe pass with nothing accepted that predicts a loss ends the probe). After
 * the probe, speculation is back on if S(K*) >= 1 with the probe's
 * evidence, and backoff returns to backoff_min; otherwise it is off again with backoff
 * doubled (at most backoff_max, where probes continue for as long as the run lasts).
 * A pair whose measured costs rule out a gain even at full acceptance
 * (sd_adaptive_speedup_bound < 0.8, every cost measured min_samples times) goes off at
 * once, for backoff_max.
 * So one or two unlucky passes never decide anything, and speculation that pays is
 * found again within backoff_max passes after a wrong turn. The controller only
 * chooses how many tokens are drafted: the output distribution (greedy, and Gumbel
 * sampling: the tokens) is the same for every K. Tests: tests/test_adaptive.c, on
 * recorded cost traces (tests/data/traces/).
 */
typedef struct sd_adaptive_params {
    int32_t k_max;        /* largest K, 1 .. SD_MAX_DRAFT */
    int auto_off;         /* 1: fall back to target alone while speculation does not pay */
    double decay;         /* per-pass decay of the acceptance counts, (0, 1); 0.95 */
    double prior_accept;  /* a_0, in (0, 1); 0.5 */
    double prior_weight;  /* w0 > 0; 1 */
    int32_t calibrate;    /* plain passes at the start, >= 1; 5 (min_samples kept + the first) */
    int32_t recalibrate;  /* one plain pass per this many while on, >= 2; 128 */
    int32_t min_samples;  /* timings of a cost before it may switch speculation off; 4 */
    int32_t off_after;    /* drafting passes in a row with S < off_margin, >= 1; 6 */
    double off_margin;    /* S below this counts against speculation, (0, 1]; 0.97 */
    int32_t probe_passes; /* drafting passes of one probe, >= 1; 2 */
    int32_t backoff_min;  /* plain passes before the first probe, >= 1; 16 */
    int32_t backoff_max;  /* cap of the doubling back-off, >= backoff_min; 128 */
    /* c / v(1) before c is measured, [0, 100); 0.1 (sd_engine_generate: the draft's
     * weight bytes / the target's, what a memory-bound step costs; an n-gram 0.01) */
    double draft_prior;
} sd_adaptive_params;

/* k_max 4, auto_off 1, and the values above. */
sd_adaptive_params sd_adaptive_default_params(void);

/* A least-squares line y = alpha + beta x with forgetting (factor 0.98 a sample; a
 * sample above twice the fit, after 4, counts as twice the fit: preemption on a shared
 * machine): the measured cost of a pass over x tokens of a batch. Before two distinct
 * sizes are seen, the line through the one mean with slope 0.35 of it per token. Zero
 * is empty. */
typedef struct sd_cost_fit {
    double sw, sx, sy, sxx, sxy;
    double x0;    /* the first x */
    int distinct; /* another x than x0 was seen */
    int64_t n;    /* samples */
} sd_cost_fit;

void sd_cost_fit_add(sd_cost_fit *f, double x, double y);
double sd_cost_fit_eval(const sd_cost_fit *f, double x); /* 0 while empty */

/*
 * Batch mode (the batcher, a sequence beside others in one target pass). The n_seqs
 * adaptive sequences of a pass (this one among them) are taken to draft alike, K tokens
 * each, so that K is the one that maximises the batch's rate, and the speedup is that
 * rate against K = 0 for all of them:
 *     S_B(K) = (Y + n E(K)) T(0) / ((Y + n) T(K)),  T(K) = K c + v_B(R0 + n (K + 1)),
 * n = n_seqs, R0 = base_rows and Y = base_yield the rows and the tokens of the rest of the
 * pass (fixed-K sequences, prompt chunks), v_B the measured target pass over n tokens
 * (pass), c the sequence's own measured drafting time per token (in a batch: the batched
 * draft passes it took part in; before one is measured draft_prior v_B(n)). With n = 1,
 * R0 = 0 and Y = 0 this is S(K) with v_B for v. While alone in its pass (n_seqs <= 1 and
 * base_rows 0) or while pass is empty the controller works as for one sequence (its own
 * per-size costs, calibration passes). In batch mode there are no
 * calibration passes (every pass measures v_B), pass timings are not kept as per-size
 * costs (they are the batch's), and "measured" (auto-off) means that v_B has min_samples
 * samples. The rest (acceptance, auto-off, probes) is the same.
 */
typedef struct sd_adaptive_batch {
    sd_cost_fit pass;  /* target pass ms over its tokens */
    int32_t n_seqs;    /* n: the adaptive sequences of the pass, this one included */
    int32_t base_rows; /* R0 */
    double base_yield; /* Y */
} sd_adaptive_batch;

/* Where the controller is. */
typedef enum sd_adaptive_state {
    SD_ADAPTIVE_ON = 0,    /* speculating (calibration passes included) */
    SD_ADAPTIVE_OFF = 1,   /* target alone, counting down to a probe */
    SD_ADAPTIVE_PROBE = 2, /* a probe: drafting to re-measure */
} sd_adaptive_state;

/* Timings kept per kind (the medians are over these). */
#define SD_ADAPTIVE_RING 32
/* Kinds of timing: 0 the draft's per-token cost, n = 1 .. SD_MAX_DRAFT + 1 a pass of n rows. */
#define SD_ADAPTIVE_KINDS (SD_MAX_DRAFT + 2)

/* The controller state: fields are the controller's own (read it through the
 * functions below); a plain struct so that it needs no allocation. */
typedef struct sd_adaptive {
    sd_adaptive_params p;
    sd_adaptive_state state;
    double acc_s[SD_MAX_DRAFT], acc_n[SD_MAX_DRAFT]; /* decayed accepted / reached at i */
    /* Costs: log of the mean and of the median of each kind's ring, timings seen per
     * kind, and the load: log L (median of the last timings' log x - log median). */
    double log_cost[SD_ADAPTIVE_KINDS], log_med[SD_ADAPTIVE_KINDS]; /* log mean, log median */
    double ring[SD_ADAPTIVE_KINDS][SD_ADAPTIVE_RING];
    int32_t n_seen[SD_ADAPTIVE_KINDS]; /* timings of the kind, the left-out first included */
    double load_ring[SD_ADAPTIVE_RING], log_load;
    int32_t n_load;
    int32_t below, countdown, backoff, k_last, empty_probes, probe_left, since_calib;
    int32_t n_passes, n_off_passes, n_probes, n_switch_off, n_calibration;
    sd_adaptive_batch batch; /* the batch of the next pass (sd_adaptive_set_batch); zero: alone */
} sd_adaptive;

/* Start a controller. Errors: SD_ERR_ARG naming the parameter out of range. */
int sd_adaptive_init(sd_adaptive *a, const sd_adaptive_params *p, sd_error *err);

/* The K for the next pass: 0 = a target-alone pass (speculation off, or calibration),
 * else 1 .. k_max. The caller may draft fewer (budget, context, no match). */
int32_t sd_adaptive_next_k(sd_adaptive *a);

/* The batch the next pass and its observation belong to (see sd_adaptive_batch); NULL, or
 * n_seqs <= 1 and base_rows 0: alone. Set before sd_adaptive_next_k; it holds until set again. */
void sd_adaptive_set_batch(sd_adaptive *a, const sd_adaptive_batch *b);
/* 1 while the controller decides in batch mode (see sd_adaptive_batch). */
int sd_adaptive_in_batch(const sd_adaptive *a);

/*
 * Record the pass that followed the last sd_adaptive_next_k:
 *   n_drafted   tokens actually proposed and verified (0 .. SD_MAX_DRAFT)
 *   n_accepted  of them accepted (0 .. n_drafted)
 *   t_draft_ms  time of drafting (0 when none)
 *   t_pass_ms   time of the target pass over n_drafted + 1 rows, verification included
 * Negative or non-finite times are left out.
 */
void sd_adaptive_observe(sd_adaptive *a, int32_t n_drafted, int32_t n_accepted, double t_draft_ms,
                         double t_pass_ms);

/* Current estimates: a_i for position i (1-based, 1 .. SD_MAX_DRAFT), E(K), v(n) and c
 * (in ms at the load of the recent timings), and the predicted speedup
 * S(K) = E(K) v(1) / (K c + v(K + 1)) (load-free). */
double sd_adaptive_accept(const sd_adaptive *a, int32_t i);
double sd_adaptive_expected_tokens(const sd_adaptive *a, int32_t k);
double sd_adaptive_pass_ms(const sd_adaptive *a, int32_t n_rows);
double sd_adaptive_draft_ms(const sd_adaptive *a);
double sd_adaptive_speedup(const sd_adaptive *a, int32_t k);
/* max_K (K + 1) v(1) / (K c + v(K + 1)): the speedup if every drafted token were
 * accepted; no draft of this cost can do better. */
double sd_adaptive_speedup_bound(const sd_adaptive *a);
/* argmax_{1..k_max} of S(K) (the smaller K on ties) with the current estimates. */
int32_t sd_adaptive_best_k(const sd_adaptive *a);
/* 1 while speculation is switched off (the next pass is target alone or a probe). */
int sd_adaptive_is_off(const sd_adaptive *a);
sd_adaptive_state sd_adaptive_state_of(const sd_adaptive *a);

/* The clock a generation times passes with, for the controller. */
typedef enum sd_pass_clock {
    SD_CLOCK_AUTO = 0,   /* sd_engine_generate: THREAD_CPU for a one-thread CPU pair, else
                            WALL; a batcher request: WALL */
    SD_CLOCK_WALL,       /* CLOCK_MONOTONIC */
    SD_CLOCK_THREAD_CPU, /* the calling thread's CPU clock: leaves out the time spent
                            waiting for a core on a shared machine, which scales every
                            choice of K alike; right only when this thread does the work */
} sd_pass_clock;

/* How a generation picks K. */
typedef enum sd_k_policy {
    SD_K_FIXED = 0,    /* K = n_draft every pass */
    SD_K_ADAPTIVE = 1, /* the controller above, k_max = n_draft, with auto-off */
    SD_K_SWEEP = 2,    /* K = pass mod (n_draft + 1): every K in turn, for recording cost
                          traces (sd_gen_params.pass_trace) under one load */
} sd_k_policy;

const char *sd_k_policy_name(sd_k_policy p); /* "fixed", "adaptive", "sweep" */
/* "fixed" / "adaptive" / "sweep" -> *out; -1 if unknown. */
int sd_k_policy_parse(const char *s, sd_k_policy *out);

/* Which proposer sd_engine_generate uses. */
typedef enum sd_draft_type {
    SD_DRAFT_AUTO = 0,   /* the LLM draft if the engine has a draft model, else none */
    SD_DRAFT_NONE,       /* target alone */
    SD_DRAFT_LLM,        /* the draft model */
    SD_DRAFT_NGRAM,      /* n-gram / prompt lookup (no draft model needed) */
    SD_DRAFT_NGRAM_LLM,  /* chained: the n-gram's match continued by the draft model in the
                            same block (the draft model alone without a match) */
    SD_DRAFT_SUFFIX,     /* suffix-structure drafting (no draft model needed) */
    SD_DRAFT_SUFFIX_LLM, /* chained: the suffix match continued by the draft model */
} sd_draft_type;

/* "auto", "none", "llm", "ngram", "ngram+llm", "suffix", "suffix+llm" (engine.c, with the
 * proposers). */
const char *sd_draft_type_name(sd_draft_type t);
/* 1 if draft type t drafts with the draft model (llm, ngram+llm, suffix+llm). */
int sd_draft_type_uses_llm(sd_draft_type t);
/* Our names, plus llama.cpp's --spec-type names that mean the same here: "draft",
 * "draft-simple" (llm), "ngram-simple" (ngram). -1 if unknown. */
int sd_draft_type_parse(const char *s, sd_draft_type *out);
/* The names sd_draft_type_parse accepts, for messages. */
#define SD_DRAFT_TYPE_NAMES                                                                        \
    "none, llm, ngram, ngram+llm, suffix, suffix+llm (llama.cpp: draft-simple, ngram-simple)"

/* Most alternatives a token's logprobs carry (OpenAI's top_logprobs limit). */
#define SD_MAX_TOP_LOGPROBS 20

/*
 * The log-probabilities of one emitted token (sd_gen_params.logprobs). Taken from the
 * target's raw distribution at the token's position: log-softmax of the target's logits
 * row as the model gives it, before the logit biases, the EOS mask of ignore_eos, the
 * penalties, temperature and the top-k / top-p / min-p warps (OpenAI's and vLLM's
 * default). The row is the same whether the token was drafted and accepted, a
 * correction, a bonus or a target-alone draw, so the values are target-alone's bit for
 * bit. Computed in double in one fixed order (sd_step_logprob, step.c): max, then
 * sum_j exp(l_j - max) over j ascending, logprob(v) = l_v - max - log(sum).
 */
typedef struct sd_token_logprob {
    int32_t token;
    int32_t n_top;  /* alternatives in top_id / top_logprob (the request's top_logprobs) */
    double logprob; /* of token */
    /* The n_top most probable tokens of the row, by logprob descending (ties: the lower
     * id first); the emitted token may or may not be among them. */
    int32_t top_id[SD_MAX_TOP_LOGPROBS];
    double top_logprob[SD_MAX_TOP_LOGPROBS];
} sd_token_logprob;

/* Context shift (llama.cpp's --context-shift; generate and serve share it: ctx_shift.c).
 * sd_ctx_shift_keep: how many first tokens of a context that starts with prompt[0 ..
 * n_prompt) every shift keeps: keep of them (keep < 0 or beyond the prompt: all of it),
 * and BOS besides when the prompt starts with bos. sd_ctx_shift_window: the context
 * win[0 .. n_cur) keeps win[0 .. n_keep) and drops the older half of the rest,
 * (n_cur - n_keep) / 2 tokens after the kept ones (the later ones move down); returns
 * that count (0, nothing moved, when n_keep >= n_cur): the window then holds n_cur minus
 * it. */
int32_t sd_ctx_shift_keep(const int32_t *prompt, int32_t n_prompt, int64_t keep, int32_t bos);
int32_t sd_ctx_shift_window(int32_t *win, int32_t n_cur, int32_t n_keep);

typedef struct sd_gen_params {
    int32_t n_predict; /* most tokens to emit (>= 1) */
    int32_t n_draft;   /* K: tokens drafted per step, 1 .. SD_MAX_DRAFT (adaptive: the most) */
    sd_sampling_params samp; /* applied to both target and draft rows */
    uint64_t seed;           /* every draw is keyed by (seed, position, purpose) */
    /* Token ids that end generation besides eos (end-of-turn tokens such as <|im_end|>),
     * not emitted. */
    int32_t stop_ids[SD_MAX_STOP_IDS];
    int32_t n_stop_ids;
    /* 1: the target's EOS is never emitted (its logit is -inf in every target row, as
     * llama.cpp's --ignore-eos), so generation runs to n_predict or the context. The
     * output follows the target's distribution conditioned on "not EOS". */
    int ignore_eos;
    sd_draft_type draft_type; /* the proposer */
    sd_k_policy k_policy;     /* fixed K or the adaptive controller */
    /* LLM draft confidence cut-off (sd_proposer_set_cutoff, set by sd_engine_generate):
     * stop drafting below draft_p_min (0: off) once draft_min tokens are drafted. */
    float draft_p_min;
    int32_t draft_min;
    /* Chained drafting (ngram+llm, suffix+llm; sd_proposer_chain_set_limits, generate and
     * serve alike): the draft model's most tokens in a block (0: K) and the kept lookup
     * length from which the lookup drafts alone (0: K), each 0 .. SD_MAX_DRAFT. With K 16,
     * 3 and 3: a long match drafts up to 16 tokens, the draft model at most 3. */
    int32_t chain_draft_max;
    int32_t chain_long_match;
    sd_pass_clock clock; /* the adaptive controller's clock */
    /* The controller's draft_prior (c / v(1) before c is measured); 0: its default.
     * sd_engine_generate sets it from the models' weight bytes. */
    double draft_prior;
    /* Optional, caller-owned: k_trace[i] receives the number of tokens drafted in pass i
     * (0: target alone), for i < k_trace_cap; stats.n_target_passes tells how many were
     * written. */
    uint8_t *k_trace;
    int32_t k_trace_cap;
    /* Optional, caller-owned: one record per pass (pass_trace[i], i < pass_trace_cap),
     * what the controller saw: the raw material of tests/data/traces/. */
    struct sd_pass_record *pass_trace;
    int32_t pass_trace_cap;
    /* Token trees (the n-gram and suffix proposals; each sequence's tree in the step's one pass;
     * docs/drafting.md): > 0, each pass drafts a tree of up to tree_width alternatives for the
     * first token, each a chain of up to n_draft tokens (tree_width * n_draft <= SD_MAX_DRAFT),
     * scored in one target pass with a tree attention mask and verified by target choice (greedy or
     * Gumbel sampling; a fixed K; a CPU target). 0 (the default): a chain. */
    int32_t tree_width;
    /* 1: the logprobs of every emitted token (sd_token_logprob), with top_logprobs
     * (0 .. SD_MAX_TOP_LOGPROBS) alternatives each. sd_engine_generate writes entry i of
     * the output to logprobs_out[i] (caller-owned, [cap_out]; required when logprobs is
     * 1); a batcher request gives them with its events (sd_req_event.logprobs). */
    int logprobs;
    int32_t top_logprobs;
    sd_token_logprob *logprobs_out;
    /* Constrained decoding (runtime/grammar/sd_grammar.h; docs/generate.md): GBNF text
     * (NUL-terminated, llama.cpp's grammar syntax; NULL: none, the default) and its start
     * rule (NULL: "root"). The batcher compiles it for the request (a bad
     * grammar is SD_ERR_FORMAT naming its line and column) and mask every target row
     * (-inf for every token the grammar refuses, before penalties and warps; EOS and the
     * stop ids allowed exactly when the grammar accepts) and every LLM draft row; one-hot
     * proposals are cut at the first token the grammar refuses. The output is then the
     * constrained target-alone output (greedy, and Gumbel sampling for a seed) whatever
     * the draft. When no token can follow, generation ends with SD_STOP_GRAMMAR. Not with
     * token trees (SD_ERR_UNSUPPORTED). */
    const char *grammar;
    const char *grammar_root;
    /* The target vocabulary's token bytes for the masks (sd_engine_grammar_vocab): set by
     * sd_engine_generate and the batcher. */
    const sd_grammar_vocab *grammar_vocab;
    /* Synthetic rejection (the batcher only; llama-server's --spec-synth-rates, for
     * testing the verification path): synth_accept[i] (caller-owned, [n_synth_accept],
     * each in [0, 1]) is the chance that draft position i may be accepted once positions
     * 0 .. i-1 were; a keyed coin (seed, position, SD_DRAW_ACCEPT) under it forces a
     * rejection there: the pass verifies only the draft before it, and the token at that
     * position is the target's (counted as drafted, not accepted). The text is unchanged
     * (a forced rejection emits what verification would); only the counts move. NULL: off. */
    const double *synth_accept;
    int32_t n_synth_accept;
    /* Context shift (llama.cpp's --context-shift; sd_ctx_shift_*): 1: when generation
     * fills the context before n_predict, the context (the prompt, then the tokens
     * emitted) keeps its first tokens (shift_keep of the prompt, -1: all of it, BOS
     * besides) and drops the older half of the rest, and generation goes on from the
     * shortened context, until n_predict tokens in all (one choice only). The batcher
     * evaluates the shortened context afresh (its kept prefix stays in the sequence's
     * blocks). 0 (the default): generation stops at the full context. */
    int context_shift;
    int64_t shift_keep;
} sd_gen_params;

/* One pass as the controller saw it (sd_gen_params.pass_trace). */
typedef struct sd_pass_record {
    int32_t k_chosen;   /* the policy's K (0: target alone) */
    int32_t n_drafted;  /* tokens proposed (<= k_chosen) */
    int32_t n_accepted; /* of them accepted */
    int32_t state;      /* the controller's sd_adaptive_state before the pass (fixed: 0) */
    double t_draft_ms;  /* drafting, on the controller's clock (a probe's catch-up excluded) */
    double t_pass_ms;   /* the target pass and its verification, on the controller's clock */
    /* The controller's view after the pass (adaptive; else 0): S(K*) and K*, c / v(1)
     * and v(K* + 1) / v(1). */
    double speedup, c_rel, v_rel;
    int32_t k_best;
    int32_t k_policy; /* the policy's K before the budget and context caps (k_chosen) */
    /* Of n_drafted, the lookup tokens of a mixed block (a chained draft type's lookup
     * match that the draft model continued in the same block: ngram+llm, suffix+llm; the
     * rest are the draft model's); 0: not a mixed block. */
    int32_t n_chain_lookup;
} sd_pass_record;

sd_gen_params sd_gen_default_params(void);

/* sd_stop_reason, sd_gen_stats (the statistics: one definition) and the sd_stats_*
 * figures are the public face's (include/specdec.h). */

/* Called with each block of newly emitted tokens, in order. Non-zero return stops
 * generation (stop reason stays SD_STOP_NONE). */
typedef int (*sd_token_cb)(void *user, const int32_t *tokens, int32_t n);

/* ---- the engine: a loaded, paired target and draft ---- */

typedef struct sd_engine sd_engine;

typedef struct sd_engine_params {
    const char *target; /* target GGUF path (required) */
    const char *draft;  /* draft GGUF path, or NULL: target alone */
    /* Prefixes for load errors of each model, naming where the path came from (e.g.
     * "pair.json: key 'target'"), or NULL. */
    const char *target_origin, *draft_origin;
    int32_t n_ctx;          /* 0: the target's training context; above it: capped, with a note */
    int32_t n_threads;      /* 0: all cores this process may use */
    sd_type kv_type;        /* KV-cache element type (default SD_TYPE_F16, every client) */
    sd_device device;       /* target's device */
    sd_device device_draft; /* draft's device */
    int32_t n_split;        /* tensor-parallel ranks of the target (0: none; -1: every GPU) */
    sd_gen_params gen;      /* defaults for sd_engine_generate */
    /* The draft's context: 0 = the target's (n_ctx as resolved); either way capped at the
     * draft's training context (with a note when asked beyond it). */
    int32_t n_ctx_draft;
    /* The n-gram lookup proposer's sizes (its n_ctx is the engine's context + 1). */
    sd_ngram_params ngram;
    /* The suffix proposer's settings (its n_ctx is the engine's context + 1). */
    sd_suffix_params suffix;
    /* A trimmed head for the LLM draft (sd_proposer_llm_set_head): the head file
     * (sd_draft_head_load) and how many of its ids (0: all), or NULL: the full head. */
    const char *draft_head;
    int32_t draft_head_n;
    /* Notes for the user (a context that was capped, ...): one line each, no newline. */
    void (*log)(void *user, const char *line);
    void *log_user;
    /* 1: load and pair the models and resolve the contexts, but make no session, scorer
     * or proposer (sd_engine_generate then fails; a batcher makes its own sessions). */
    int models_only;
} sd_engine_params;

/* target NULL, target alone, n_ctx 0, all cores, F16 KV cache, CPU, sd_gen_default_params. */
sd_engine_params sd_engine_default_params(void);

/*
 * Load p->target (and p->draft), check that they pair, resolve the contexts and make the
 * scorer (and the proposer). Errors: each model's load errors (prefixed with its origin
 * when given), SD_ERR_MISMATCH (the vocabularies do not pair: both files named),
 * SD_ERR_ARG (no target), SD_ERR_OOM.
 */
int sd_engine_init(const sd_engine_params *p, sd_engine **out, sd_error *err);
void sd_engine_free(sd_engine *e); /* NULL accepted */

const sd_model *sd_engine_target(const sd_engine *e);
const sd_model *sd_engine_draft(const sd_engine *e); /* NULL: target alone */
const sd_vocab *sd_engine_vocab(const sd_engine *e); /* the target's */
sd_scorer *sd_engine_scorer(sd_engine *e);
sd_proposer *sd_engine_proposer(sd_engine *e); /* the LLM draft; NULL: no draft model */
/* The proposer of a draft type: SD_DRAFT_NGRAM and SD_DRAFT_SUFFIX always exist; SD_DRAFT_LLM,
 * SD_DRAFT_NGRAM_LLM and SD_DRAFT_SUFFIX_LLM need a draft model (else NULL); SD_DRAFT_NONE:
 * NULL; SD_DRAFT_AUTO: the LLM draft if any. */
sd_proposer *sd_engine_proposer_of(sd_engine *e, sd_draft_type t);
/* 1 if sd_engine_proposer_of(e, t) gives a proposer, asked without making the
 * single-sequence sessions (which the getters above make on first use; sd_engine_generate
 * runs a batcher of its own and never needs them). */
int sd_engine_has_proposer(const sd_engine *e, sd_draft_type t);
/* The target vocabulary's token bytes for grammar masks (sd_grammar_vocab over
 * sd_vocab_token_to_piece), built on the first call and kept by the engine (not
 * thread-safe on that first call). Errors: SD_ERR_OOM. */
int sd_engine_grammar_vocab(sd_engine *e, const sd_grammar_vocab **out, sd_error *err);
int32_t sd_engine_n_ctx(const sd_engine *e);       /* target context in use */
int32_t sd_engine_n_ctx_draft(const sd_engine *e); /* 0 without a draft */
const sd_engine_params *sd_engine_params_of(const sd_engine *e);
/* The session parameters the engine made the target's (draft = 0) or the draft's
 * (draft = 1) session with (e.g. for a benchmark's own sessions of the same models). */
sd_session_params sd_engine_session_params(const sd_engine *e, int draft);

/* The adaptive controller's draft_prior for draft type t when the request sets none: a
 * memory-bound draft step costs its weight bytes' share of the target's (the LLM types),
 * a lookup 0.01. Both clients (sd_engine_generate, the batcher) use it. */
double sd_engine_draft_prior(const sd_engine *e, sd_draft_type t);

/*
 * Generate after prompt[0 .. n_prompt) (n_prompt >= 1, e.g. just BOS) with gp (NULL: the
 * engine's p->gen) and drafts of gp->draft_type with its confidence cut-off, through the
 * batcher's step on one sequence (a one-slot batcher made on the first call and kept: its
 * prefix cache lets a later prompt reuse an earlier one's blocks); gp->n_draft == 0 or
 * SD_DRAFT_NONE (or AUTO without a draft model): target alone. out: int32 [cap_out]
 * receives the emitted ids (cap_out >= n_predict). Generation stops at the target's EOS, at every
 * end-of-generation token of its vocabulary (sd_vocab_eog_ids: <|im_end|>, <|eot_id|>, ...) and at
 * gp's stop ids; with gp->ignore_eos none of them is ever emitted (their logits are -inf).
 * Errors: SD_ERR_ARG for bad parameters (and a draft type that needs a draft model the
 * engine does not have), the batcher's (SD_ERR_CONTEXT when the prompt does not fit),
 * model errors; running out of context during generation is not an error: stop =
 * SD_STOP_CONTEXT. gp->context_shift: a full context is shifted and generation goes on
 * (the statistics add up over the segments, the prompt figures the first's); kept tokens
 * that leave no room (n_keep >= n_ctx / 2) end it at the context.
 */
int sd_engine_generate(sd_engine *e, const sd_gen_params *gp, const int32_t *prompt,
                       int32_t n_prompt, sd_token_cb cb, void *user, int32_t *out, int32_t cap_out,
                       sd_gen_stats *stats, sd_error *err);

/* Forget the prompts of earlier runs (the one-slot batcher's prefix cache, both pools):
 * the next run prefills its prompt from scratch (bench). */
void sd_engine_clear_cache(sd_engine *e);

/* The context shift of a conversation between runs (the interactive chat's
 * --context-shift): when the prefix cache of the
 * one-slot batcher holds the first positions of conv[0 .. n_conv) (an earlier run's prompt
 * and output), a sequence takes them, drops [n_keep, n_keep + n_discard) and moves the
 * rest down with its keys re-rotated (sd_session_seq_shift), and is cached again under the
 * shortened conversation's tokens (conv without that run), so the next run whose prompt
 * starts with them reuses those rows instead of evaluating them (the draft's cache keeps
 * the kept prefix only: its rows are evaluated afresh). *n_shifted: the positions of the
 * shortened conversation the cache then holds (0: none were cached past n_keep +
 * n_discard, or the target's session cannot shift, SD_ERR_UNSUPPORTED, or had no block
 * left: the next run evaluates them). The cached rows are then not what a fresh
 * evaluation computes (the moved rows of layers after the first carry what they attended
 * to in the dropped run, as llama.cpp's shifted slot): sd_engine_clear_cache drops them.
 * Errors: SD_ERR_ARG (a bad range; nothing else fails: what cannot be shifted is
 * evaluated by the next run). */
int sd_engine_shift_cached(sd_engine *e, const int32_t *conv, int32_t n_conv, int32_t n_keep,
                           int32_t n_discard, int32_t *n_shifted, sd_error *err);

/* The lookup cache (caller-owned, outliving the engine; NULL: none) that the n-gram
 * proposers of the one-slot batcher (and the engine's own) also look in
 * (sd_proposer_ngram_set_cache). Errors: its, SD_ERR_OOM (the generate context that keeps it). */
int sd_engine_set_lookup_cache(sd_engine *e, const sd_ngram_cache *c, sd_error *err);

/* ---- stop strings over the streamed text (stop_text.c): both clients ---- */

#define SD_STOP_NOT_FOUND ((size_t)-1)

/* The earliest offset p >= from in text[0 .. len) where one of the n_stop stop strings
 * (stop[i] of stop_len[i] >= 1 bytes) starts, or SD_STOP_NOT_FOUND. */
size_t sd_stop_find(const char *text, size_t len, size_t from, const char *const *stop,
                    const size_t *stop_len, int32_t n_stop);
/* The bytes at the end of text[sent .. len) that may be the start of a stop string: held
 * back until the next text shows whether it is one. */
size_t sd_stop_holdback(const char *text, size_t len, size_t sent, const char *const *stop,
                        const size_t *stop_len, int32_t n_stop);

/* A block of emitted tokens and the text that became final with them (len may be 0; at
 * the end tokens may be NULL, n 0). Non-zero return stops generation (stop NONE). */
typedef int (*sd_text_cb)(void *user, const int32_t *tokens, int32_t n, const char *text,
                          size_t len);

/* One generation's text: the tokens' pieces through a streaming detokenizer
 * (detok_flags: sd_detok_init's), cut at the earliest of its stop strings. The batcher's
 * choices do the same (batch_out.c, with sd_stop_find and sd_stop_holdback): a stop
 * string is searched for after each pass, in the text not given yet, so both clients stop
 * at the same pass, with the same tokens and statistics, and give the same text. */
typedef struct sd_stop_text sd_stop_text;
/* stop: n_stop (0 .. SD_MAX_STOP_STRINGS) non-empty strings, copied. Errors: SD_ERR_ARG,
 * SD_ERR_OOM. */
int sd_stop_text_init(const sd_vocab *v, const char *const *stop, int32_t n_stop,
                      unsigned detok_flags, sd_text_cb cb, void *user, sd_stop_text **out,
                      sd_error *err);
void sd_stop_text_free(sd_stop_text *s); /* NULL accepted */
/* The text so far (cut before a stop string; NUL-terminated when *len > 0). */
const char *sd_stop_text_get(const sd_stop_text *s, size_t *len);
/* 1 once a stop string was found. */
int sd_stop_text_hit(const sd_stop_text *s);
/* An sd_token_cb (user: the sd_stop_text): the tokens' text, the callback with the part
 * that became final; returns 1 at a stop string or when the callback asks to stop. */
int sd_stop_text_tokens(void *user, const int32_t *tokens, int32_t n);
/* The end of the text: the detokenizer's held-back bytes (unless a stop string was
 * found), the search, and the callback with every byte not given yet. st (may be NULL):
 * its stop becomes SD_STOP_STRING when a stop string ended the text. Returns the
 * callback's value. */
int sd_stop_text_finish(sd_stop_text *s, sd_gen_stats *st);

/* sd_engine_generate streaming through txt (its callback gets the tokens and the text):
 * generation stops after the pass whose text holds one of txt's stop strings, with stop
 * SD_STOP_STRING (out and the statistics hold every token of that pass, as the batcher's
 * do); call sd_stop_text_finish at the end. Several calls with one txt continue one text
 * (context shifts); after a stop string a further call generates nothing. Errors: as
 * sd_engine_generate, and the text's SD_ERR_OOM. */
int sd_engine_generate_text(sd_engine *e, const sd_gen_params *gp, sd_stop_text *txt,
                            const int32_t *prompt, int32_t n_prompt, int32_t *out, int32_t cap_out,
                            sd_gen_stats *stats, sd_error *err);

/* ---- prompts: text or chat messages -> token ids (prompt.c) ---- */

/* What a prompt is made of (generate's -p / --chat and a server's request bodies). */
typedef struct sd_prompt_spec {
    const char *text; /* raw prompt text (len bytes), or NULL with messages */
    size_t len;
    /* Chat: messages formatted with the chat template (tmpl: a name or a Jinja text,
     * NULL = the vocabulary's tokenizer.chat_template), then the assistant header. */
    const sd_chat_msg *messages;
    size_t n_messages;
    const char *tmpl;
    int special; /* 1: control-token texts in raw text are tokens (chat text always is) */
    int no_bos;  /* 1: no BOS even where the vocabulary adds one */
} sd_prompt_spec;

/*
 * Tokenize a prompt: raw text as sd_vocab_tokenize with SD_VOCAB_ADD_SPECIAL (unless
 * no_bos) and SD_VOCAB_PARSE_SPECIAL when special; chat messages through sd_chat_apply
 * (add_generation_prompt) and then tokenized with control tokens parsed. *ids malloc'd
 * (caller frees). Errors: SD_ERR_ARG (neither or both of text / messages, an empty
 * prompt), the template's (SD_ERR_UNSUPPORTED naming it), SD_ERR_OOM.
 */
int sd_prompt_tokenize(const sd_vocab *v, const sd_prompt_spec *p, int32_t **ids, int32_t *n,
                       sd_error *err);

/* ---- several requests at once: continuous batching (batcher.c, batch_step.c) ---- */

/*
 * The batcher runs many requests over one engine's models (made with models_only) with
 * its own sessions: a target session and, with a draft model, a draft session, each of
 * n_parallel sequences over one paged KV pool (kv/: blocks, copy-on-write, prefix cache;
 * CPU only). Requests wait in a queue and are admitted between steps while a sequence
 * slot is free and the pools have the blocks their worst case needs (prompt + max tokens
 * + a draft; a request never fails half-way for want of blocks). Each step (one call of
 * sd_batcher_step):
 *   1. every decoding request gets its proposal: its own n-gram state, and one batched
 *      draft pass per draft position over all requests that draft with the LLM (the
 *      draft's own prompt catch-up rides in the first of them);
 *   2. one target pass over every decoding request's rows [last, d1 .. dK] and chunks of
 *      the prompts being prefilled (decode rows first, prefill chunks in arrival order up
 *      to n_batch tokens; the chunk that ends a prompt also yields its first token);
 *   3. per request: verification (sd_verify_keyed: greedy, Gumbel or rejection sampling,
 *      every draw keyed by the request's seed and the position, as generate's), the KV
 *      commit (rejected rows leave both caches), stop checks
 *      (EOS and end-of-generation ids, stop ids, stop strings, max tokens, context),
 *      streaming detokenization, the callback.
 * Batch invariance: a sequence's logits rows are bit-identical whatever else is in a
 * pass (sd_batch), and its draws are keyed by its seed and the positions; so a request's
 * output, greedy or sampled for a given seed, is the same alone or beside any others, in
 * any arrival order, with or without a cached prefix. Greedy and Gumbel sampling (the
 * default, SD_SPEC_GUMBEL) emit the target-alone text of the seed whatever the draft
 * and K, so for them any K policy keeps this; rejection sampling's text depends on the
 * K of each pass, so only the fixed policy does (the adaptive one picks K from measured
 * times, which other requests change).
 * Thread safety: submit, cancel, stats and wait may be called from any thread; step
 * from one thread at a time (the callbacks run on it).
 */
typedef struct sd_batcher sd_batcher;

typedef struct sd_batcher_params {
    int32_t n_parallel;  /* sequences decoding at once (slots), 1 .. SD_MAX_SEQ (4) */
    int32_t n_ctx;       /* positions per sequence, 0 = the engine's context */
    int32_t n_kv_blocks; /* blocks per pool, 0 = n_parallel sequences of n_ctx */
    int32_t kv_block;    /* positions per block (16) */
    int32_t n_batch;     /* most tokens of one target pass (512) */
    int32_t k_max;       /* largest draft a request may ask for, 1 .. SD_MAX_DRAFT (8) */
    int32_t max_queue;   /* most requests waiting; beyond: SD_ERR_BUSY (64) */
    int prefix_cache;    /* 1: a prompt reuses cached blocks of earlier ones (1) */
    int32_t draft_chunk; /* prompt tokens the draft catches up per request per step (64) */
    /* Bytes of the cross-request suffix cache (sd_suffix_cache: every finished choice's
     * prompt and output, LRU by request), which requests of draft type suffix also draft
     * from; 0: none (the default). */
    size_t suffix_cache_bytes;
    /* A persistent lookup cache (sd_ngram_cache, specdec generate's --lookup-cache) that
     * every sequence's n-gram proposer also looks in when its context has no match, as
     * generate's (sd_proposer_ngram_set_cache); read only, caller-owned, outliving the
     * batcher; NULL: none (the default). */
    const sd_ngram_cache *lookup_cache;
} sd_batcher_params;

sd_batcher_params sd_batcher_default_params(void);

/* One piece of a request's output, given to its callback. */
typedef struct sd_req_event {
    int64_t id;            /* the request's id (sd_batcher_submit) */
    int32_t index;         /* the choice, 0 .. n_choices - 1 */
    const int32_t *tokens; /* the ids emitted since the last event of this choice */
    int32_t n_tokens;
    /* [n_tokens] their logprobs when the request asked (gen.logprobs), else NULL */
    const sd_token_logprob *logprobs;
    const char *text; /* the text that became final (UTF-8; a stop string and what */
    size_t len;       /* follows it are never given; bytes that could start one wait) */
    int done;         /* 1: the choice has ended; stop says why, stats are final */
    sd_stop_reason stop;
    const sd_gen_stats *stats; /* this choice's statistics so far */
    /* 1: a prompt-progress event (only when the request asked: sd_request.progress) of
     * choice 0, no tokens and no text: n_processed of the prompt's positions are in the
     * target's KV cache (stats->n_prompt_cached of them from the prefix cache). One when
     * the request is admitted (n_processed: the cached positions), one after each prompt
     * chunk but the last (the prompt but its last token: that token goes with the first
     * decoding pass, whose token event follows). */
    int progress;
    int32_t n_processed;
    /* Context shifts of the choice so far (gen.context_shift): its context filled and
     * went on in a shortened window that many times (llama-server's "truncated"). */
    int32_t n_ctx_shifts;
} sd_req_event;

/* Return non-zero to cancel the request (every choice; a done event follows for each
 * choice not done yet, with stop SD_STOP_CANCEL). Runs on the stepping thread: it must
 * not block (a slow client must not stall the others) nor call into the batcher. */
typedef int (*sd_req_cb)(void *user, const sd_req_event *ev);

/* SD_MAX_STOP_STRINGS: include/specdec.h */
#define SD_MAX_CHOICES 16

typedef struct sd_request {
    const int32_t *prompt; /* int32 [n_prompt] (copied), n_prompt >= 1 */
    int32_t n_prompt;
    /* n_predict, n_draft (K, 0 = target alone; at most the batcher's k_max), samp,
     * seed, stop_ids, ignore_eos, draft_type, k_policy, draft_p_min, draft_min. The
     * vocabulary's end-of-generation ids are added to the stop ids. */
    sd_gen_params gen;
    const char *const *stop; /* stop strings (copied), n_stop <= SD_MAX_STOP_STRINGS */
    int32_t n_stop;
    int32_t n_choices; /* choices sharing the prompt's blocks (1 .. SD_MAX_CHOICES); choice i
                          draws with seed + i */
    sd_req_cb cb;
    void *user;
    int progress; /* 1: prompt-progress events too (sd_req_event.progress) */
    /* 1: a prompt plus max tokens beyond a sequence's context is accepted, and generation
     * ends with stop SD_STOP_CONTEXT once the context is full (as sd_engine_generate); 0 (the
     * default): such a request is refused (SD_ERR_CONTEXT). gen.context_shift implies it
     * (a full context is shifted, and the choice goes on; with kept tokens that leave no
     * room, n_keep >= n_ctx / 2, it ends there). */
    int stop_at_context;
} sd_request;

/* Make a batcher over e's models (e made with models_only, or not: its own sessions are
 * not used), its threads, KV type and n-gram sizes. Errors: SD_ERR_ARG (parameters out
 * of range, naming them), SD_ERR_UNSUPPORTED (a device other than the CPU, tensor
 * parallelism), the sessions' (SD_ERR_OOM naming the pool). */
int sd_batcher_init(sd_engine *e, const sd_batcher_params *p, sd_batcher **out, sd_error *err);
/* Free (requests still queued or running end without a callback). NULL accepted. */
void sd_batcher_free(sd_batcher *b);

/* Queue a request; *id (may be NULL) gets its id (ids ascend from 1). Errors:
 * SD_ERR_ARG (bad ids, lengths, sampling, a draft type the engine cannot serve),
 * SD_ERR_CONTEXT (prompt plus max tokens exceed a sequence's context, or more blocks
 * than a pool has), SD_ERR_BUSY (the queue is full, or the batcher is closed). */
int sd_batcher_submit(sd_batcher *b, const sd_request *r, int64_t *id, sd_error *err);
/* Cancel a queued or running request: its sequences and blocks are freed at the start
 * of the next step. 0 if found, -1 if not (finished, or never there). */
int sd_batcher_cancel(sd_batcher *b, int64_t id);
/* Stop admitting (submit fails with SD_ERR_BUSY); cancel_all also cancels everything
 * queued or running. */
void sd_batcher_close(sd_batcher *b, int cancel_all);

/* Run one step (see above). Returns SD_OK (also when there was nothing to do) or a
 * model error, which ends the requests of that pass (done, stop NONE) and is returned
 * once; the batcher stays usable. */
int sd_batcher_step(sd_batcher *b, sd_error *err);
/* 1 if a request is queued or running. */
int sd_batcher_busy(sd_batcher *b);
/* Block until a request is queued or cancelled, or timeout_ms pass (0: do not wait). */
void sd_batcher_wait(sd_batcher *b, int32_t timeout_ms);

typedef struct sd_batcher_stats {
    int64_t n_submitted, n_finished, n_cancelled, n_rejected; /* requests */
    int32_t n_queued, n_running;                              /* now */
    int64_t n_prompt_tokens, n_generated, n_drafted, n_accepted, n_target_passes;
    int64_t n_pass_rows;             /* rows of all target passes */
    int64_t n_prefix_hit_tokens;     /* prompt positions reused from the prefix cache */
    sd_kv_pool_stats kv, kv_draft;   /* the pools (kv_draft zero without a draft) */
    size_t kv_bytes_per_token;       /* target KV bytes per position */
    size_t kv_bytes_per_token_draft; /* the draft's, 0 without one */
    double tokens_per_s;             /* generated tokens per second over the last ~10 s */
    double t_busy_ms;                /* time spent in steps */
} sd_batcher_stats;

void sd_batcher_get_stats(sd_batcher *b, sd_batcher_stats *out);
/* Check both pools' accounting against the sequences (sd_session_kv_check): SD_OK, or
 * SD_ERR_ARG naming the leak. Call between steps. */
int sd_batcher_check(sd_batcher *b, sd_error *err);
/* Drop the prefix cache's idle blocks (both pools); call between steps. */
void sd_batcher_clear_cache(sd_batcher *b);
/* The positions one sequence may hold. */
int32_t sd_batcher_n_ctx(const sd_batcher *b);

#ifdef __cplusplus
}
#endif
#endif /* SD_ENGINE_H */
