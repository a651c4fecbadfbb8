/*
 * runtime/engine/step.h: PRIVATE to runtime/engine. The parts of one speculative pass of
 * the batcher (batch_step.c, batch_out.c; one sequence for sd_engine_generate, many for
 * serve), so every client decides K, reads the target rows, verifies and counts the
 * statistics in one place:
 *   sd_step_cap_k        K capped by the token budget and the context;
 *   sd_step_finish       the end of a sequence's pass: verification over its target rows
 *                        made on demand (sd_step_row: EOS and stop ids masked under
 *                        ignore_eos, penalties, warp), the pass's statistics
 *                        (sd_step_count_pass), the commit up to a stop id or the budget
 *                        with its statistics and stop reason (sd_step_commit);
 *   sd_step_add_eog      the vocabulary's end-of-generation ids merged into the stop ids;
 *   sd_step_logprob      an emitted token's logprobs from the target's raw row (the
 *                        copies sd_step_row keeps before it changes a row).
 */
#ifndef SD_ENGINE_STEP_H
#define SD_ENGINE_STEP_H

#include "runtime/engine/sd_engine.h"

/* K for the next pass of a sequence (k: the policy's), capped so that one pass never
 * emits past the budget (n_predict) or the context n_ctx_max: at most
 * n_predict - n_generated - 1 and n_ctx_max - n_ctx, never below 0. */
int32_t sd_step_cap_k(const sd_gen_params *gp, int32_t k, int32_t n_generated, int32_t n_ctx,
                      int32_t n_ctx_max);

/* A probe's catch-up of an LLM draft after target-alone passes is windowed to
 * SD_CATCHUP_WINDOW tokens (the draft's view: the first token, then the recent window)
 * once a full one has cost more than SD_CATCHUP_BUDGET target-alone passes per token
 * caught up: then catching up on every token generated while off would cost that
 * fraction of the time off, whatever the back-off (on the shipped TinyStories pair a
 * draft prefill token costs about 12% of a target step). Both clients. */
#define SD_CATCHUP_WINDOW 16
#define SD_CATCHUP_BUDGET 0.02

/* The controller's clock in ms (sd_pass_clock; AUTO and WALL: the wall clock), for both
 * clients' timings of drafting and passes. */
double sd_step_clock_ms(sd_pass_clock c);

/* 1 if t ends generation: eos or one of gp's stop ids. */
int sd_step_is_stop(const sd_gen_params *gp, int32_t eos, int32_t t);

/* One sequence's pass once the target's rows are in: its request, its committed tokens,
 * the proposal, the rows and the scratch they are verified with. */
typedef struct sd_step_pass {
    const sd_gen_params *gp; /* its stop ids hold the end-of-generation ids (sd_step_add_eog) */
    int32_t eos, n_vocab;
    uint64_t seed;        /* the key of the sequence's draws */
    int32_t *ctx;         /* [n_ctx + k + 1 at least] committed tokens; the commit appends */
    int32_t n_ctx;        /* committed, advanced by the commit */
    const int32_t *draft; /* [k] the drafted tokens */
    int32_t k;            /* drafted (0: the target-alone draw) */
    const float *q;       /* [k, n_vocab] the draft's rows (rejection sampling), or NULL */
    int lookup;           /* the proposal is an n-gram lookup (statistics) */
    float *logits;        /* [k + 1, n_vocab] the target's rows, masked and penalised in place */
    float *probs;         /* [k + 1, n_vocab] warped rows (sampling) */
    float *residual;      /* [n_vocab] */
    int32_t *iscratch;    /* [n_vocab] */
    sd_gen_stats *st;
    /* A token tree (sd_proposal.parent): draft[i]'s parent (-1: the root), or NULL for a
     * chain. Its rows: row 0 the root, row i + 1 after node i; verified by
     * sd_verify_tree_keyed, the accepted nodes into path. */
    const int32_t *parent;
    int32_t *path; /* [SD_MAX_DRAFT] (out, trees) */
    /* Logprobs (gp->logprobs; NULL both: off). raw: [k + 1, n_vocab], row i a copy of
     * logits row i as the model gave it, which sd_step_row makes before it changes the
     * row (bit i of raw_have, zero at the start); lp: [k + 1] receives the committed
     * tokens' logprobs (sd_step_finish), lp[i] for the i-th committed token. */
    float *raw;
    sd_token_logprob *lp;
    uint32_t raw_have;
    int32_t n_committed; /* out: the tokens sd_step_finish committed */
    /* Grammar (gp->grammar; NULL all: none). gseq: the sequence's state after the
     * committed tokens, advanced by the commit; gchain: [k + 1] row i's state (after the
     * committed tokens and draft[0 .. i): sd_step_grammar_chain); gbits: scratch
     * [(n_vocab + 63) / 64]. g_dead: 1 + the first row the grammar allowed no token in
     * (0: none; the pass then ends the sequence there with SD_STOP_GRAMMAR). */
    sd_grammar_state *gseq;
    sd_grammar_state *const *gchain;
    uint64_t *gbits;
    int32_t g_dead;
} sd_step_pass;

/* Row i of the pass (sd_verify_row_fn; user is an sd_step_pass), made when verification
 * first reads it: first copied to p->raw (logprobs), then the logit biases (as the LLM
 * draft's rows), EOS and the stop ids masked (ignore_eos), the penalties of its history
 * (the committed tokens, then the drafts before it), and for sampling the warp. NULL
 * with err set when the warp fails. */
const float *sd_step_row(void *user, int32_t i, sd_error *err);

/* Row r of a tree pass (sd_verify_row_fn; user an sd_step_pass with parent set): as
 * sd_step_row with the history the committed tokens, then the path to node r - 1. */
const float *sd_step_tree_row(void *user, int32_t r, sd_error *err);

/* A pass that drafted k tokens (lookup: a one-hot n-gram proposal): n_target_passes,
 * k_hist, n_drafted, drafted_at and the lookup counts. (sd_step_finish counts a tree of k
 * nodes as k drafted tokens, and in drafted_at only its depths: per-position acceptance is
 * then the chance that a position the tree reached was accepted.) */
void sd_step_count_pass(sd_gen_stats *st, int32_t k, int lookup);

/* Commit the verified tokens toks[0 .. n) to ctx (appended at *n_ctx) up to the first
 * stop id (not committed: st->n_stop_tokens = 1, stop EOS) or the n_predict budget
 * (stop MAX_TOKENS); the first n_accepted are the accepted drafts. Returns the tokens
 * committed. ctx must have room for n more. */
int32_t sd_step_commit(const sd_gen_params *gp, int32_t eos, const int32_t *toks, int32_t n,
                       int32_t n_accepted, int lookup, int32_t *ctx, int32_t *n_ctx,
                       sd_gen_stats *st);

/* The end of one sequence's pass, for both clients: verify the k drafts against the rows
 * made on demand (sd_step_row; every draw keyed by seed and the positions; its time in
 * st->t_sample_ms), count the pass, and commit the verified tokens (sd_step_commit),
 * with their logprobs in p->lp when p->raw is set (committed token i came from row i).
 * Returns the verification's status; on success p->n_ctx is past the committed tokens
 * (p->n_committed of them) and *res holds what verification gave. The caches are the
 * caller's to roll back. */
int sd_step_finish(sd_step_pass *p, sd_verify_result *res, sd_error *err);

/* The logprobs of token (in [0, n_vocab)) and its n_top (0 .. SD_MAX_TOP_LOGPROBS)
 * alternatives from the raw logits row [n_vocab] (see sd_token_logprob): in double,
 * m = max_j row[j] (NaN entries left out), s = sum_j exp(row[j] - m) over j ascending,
 * logprob(v) = (row[v] - m) - log(s); the alternatives are the n_top largest entries,
 * descending, ties to the lower id, NaN never among them. */
void sd_step_logprob(const float *row, int32_t n_vocab, int32_t token, int32_t n_top,
                     sd_token_logprob *out);

/* ---- grammar (gp->grammar), for both clients ---- */

/* Compile gp->grammar (gp->grammar_root) into *out (NULL when gp->grammar is NULL) and
 * check what it needs: gp->grammar_vocab of n_vocab tokens, no token trees. Errors:
 * SD_ERR_FORMAT (the grammar's, prefixed "grammar"), SD_ERR_ARG, SD_ERR_UNSUPPORTED,
 * SD_ERR_OOM. */
int sd_step_grammar_compile(const sd_gen_params *gp, int32_t n_vocab, sd_grammar **out,
                            sd_error *err);

/* The end ids of gp's grammar masks: eos (if >= 0) and gp's stop ids, into ends
 * [SD_MAX_STOP_IDS + 1]; returns how many. */
int32_t sd_step_grammar_ends(const sd_gen_params *gp, int32_t eos, int32_t *ends);

/* The states of a proposal: chain[0] := seq, chain[i + 1] := chain[i] after draft[i], and
 * *k cut at the first draft token the grammar refuses or that ends generation (an end id:
 * the target gives it itself). chain: [SD_MAX_DRAFT + 1] states of seq's grammar
 * (sd_grammar_state_clone). Errors: SD_ERR_OOM. */
int sd_step_grammar_chain(const sd_grammar_state *seq, const sd_gen_params *gp, int32_t eos,
                          const int32_t *draft, int32_t *k, sd_grammar_state **chain,
                          sd_error *err);

/* Mask the n-entry logits row l (entry j is token ids[j], ids NULL: token j) with the
 * tokens state allows (bits: scratch [(n_vocab + 63) / 64] of the grammar's vocabulary;
 * -inf for the others). Returns the entries left finite (0: nothing may follow), or -1
 * on allocation failure. The LLM draft rows of the batcher. */
int64_t sd_step_grammar_mask_row(sd_grammar_state *state, const sd_gen_params *gp, int32_t eos,
                                 uint64_t *bits, float *l, int32_t n, const int32_t *ids);

/* Add the vocabulary's end-of-generation ids (<|im_end|>, <|eot_id|> ...) that g lacks to
 * its stop ids, as llama.cpp stops at them. SD_ERR_UNSUPPORTED when they do not fit. */
int sd_step_add_eog(sd_gen_params *g, const sd_vocab *v, sd_error *err);

#endif /* SD_ENGINE_STEP_H */
