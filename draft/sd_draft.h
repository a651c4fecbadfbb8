/*
 * draft/: proposers. Owns each proposer's state (an LLM draft's session and KV cache).
 * May include runtime/base, runtime/model and verify/sd_sample.h (sampling, never the
 * verifier, never a backend).
 * A proposer looks at the committed context and proposes up to k tokens, each with the
 * probability row it was drawn from (the q of speculative sampling: the warped draft
 * distribution over the target's vocabulary, after penalties, temperature, top-k, min-p
 * and top-p, exactly the row the token was sampled from), or, when its tokens are a
 * function of the context and of noise the verifier does not use (greedy, Gumbel-max
 * drafting, n-gram lookup), as a one-hot proposal without rows.
 * (vLLM spec_decode/interfaces.py SpeculativeProposals: token ids, probs, lengths.)
 *
 * Implementations sit behind a table of function pointers (sd_proposer_ops); another
 * sequential drafter is one more table. (Drafters that propose trees of tokens, as
 * EAGLE-2's, would also need tree verification and a tree attention mask in the model,
 * which the faces do not carry yet.)
 *   - llm.c: a small LLM run autoregressively with its own KV cache; it rolls its cache
 *     back to the accepted prefix at the start of the next proposal, stops early when
 *     its confidence falls below a cut-off (sd_proposer_set_cutoff), and may score only
 *     a trimmed head of frequent ids (sd_proposer_llm_set_head, FR-Spec);
 *   - ngram.c: n-gram / prompt lookup (HF prompt_lookup_num_tokens, vLLM "ngram",
 *     llama.cpp lookup / ngram-simple): the tokens that followed the most recent earlier
 *     occurrence of the context's last n tokens. Deterministic, so q is one-hot and the
 *     proposal carries no rows (sd_proposal.one_hot);
 *   - suffix.c: suffix-structure drafting (SuffixDecoding): the longest match of the
 *     context's end in an online suffix automaton of the context, continued by the most
 *     frequent followers; deterministic, one-hot like the n-gram;
 *   - chain.c: chained drafting: the n-gram's or suffix's match, continued in the same
 *     block by the LLM draft from the match's end (the LLM alone when there is no match);
 *   - head.c: the trimmed head's frequency table (file), and the vocabulary
 *     fingerprint that the lookup cache and the head files carry.
 */
#ifndef SD_DRAFT_H
#define SD_DRAFT_H

#include <stdint.h>

#include "runtime/base/sd_base.h"
#include "runtime/grammar/sd_grammar.h"
#include "runtime/model/sd_model.h"
#include "verify/sd_sample.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A proposal. tokens[0 .. n) are the drafted ids; probs is float [n, n_vocab] (row i
 * is the warped distribution draft token i was drawn from). probs is owned by the
 * proposer and valid until its next propose call.
 * one_hot = 1: the tokens are a deterministic function of the context and of draws the
 * verifier does not make (n-gram lookup; a greedy LLM draft; a Gumbel-max LLM draft,
 * whose noise only decides which token it proposes), so given those q_i is the point
 * mass at tokens[i]; probs is then NULL (no [n, n_vocab] rows of zeros and ones) and
 * the verifier treats the proposal as one-hot (sd_verify_onehot, sd_verify_keyed with
 * q NULL). lookup = 1: the n-gram proposer made it (for statistics). */
typedef struct sd_proposal {
    int32_t n;
    int32_t n_vocab;
    int32_t tokens[SD_MAX_DRAFT];
    const float *probs;
    int one_hot;
    int lookup;
    /* A token tree (sd_proposer_propose_tree): parent[i] of node i (-1: it follows the
     * committed context; else < i); a chain has parent[i] = i - 1. Sibling tokens are
     * distinct. Filled by sd_proposer_propose_tree only. */
    int32_t parent[SD_MAX_DRAFT];
} sd_proposal;

typedef struct sd_proposer sd_proposer;

typedef struct sd_proposer_ops {
    const char *name;
    /* See sd_proposer_prefill. */
    int (*prefill)(sd_proposer *p, const int32_t *ctx, int32_t n_ctx, sd_error *err);
    /* See sd_proposer_propose. */
    int (*propose)(sd_proposer *p, const int32_t *ctx, int32_t n_ctx, int32_t k, sd_proposal *out,
                   sd_error *err);
    /* See sd_proposer_commit. */
    void (*commit)(sd_proposer *p, const int32_t *ctx, int32_t n_ctx);
    /* See sd_proposer_reset (NULL: nothing to reset). */
    void (*reset)(sd_proposer *p, const sd_sampling_params *samp, uint64_t seed);
    /* See sd_proposer_set_cutoff (NULL: the proposer has no confidence). */
    void (*set_cutoff)(sd_proposer *p, float p_min, int32_t n_min);
    /* See sd_proposer_catch_up (NULL: prefill). */
    int (*catch_up)(sd_proposer *p, const int32_t *ctx, int32_t n_ctx, int32_t window,
                    sd_error *err);
    void (*free)(sd_proposer *p);
    /* See sd_proposer_propose_tree (NULL: the proposer drafts chains only). */
    int (*propose_tree)(sd_proposer *p, const int32_t *ctx, int32_t n_ctx, int32_t width,
                        int32_t depth, sd_proposal *out, sd_error *err);
    /* See sd_proposer_set_grammar (NULL: the proposer ignores grammars). */
    int (*set_grammar)(sd_proposer *p, const sd_grammar_state *state, const sd_grammar_vocab *gv,
                       const int32_t *ends, int32_t n_end, sd_error *err);
    /* See sd_proposer_sizes_itself (0: the caller's K is the draft length it wants). */
    int sizes_itself;
} sd_proposer_ops;

struct sd_proposer {
    const sd_proposer_ops *ops;
};

/*
 * Propose up to k tokens to follow ctx[0 .. n_ctx).
 *   ctx : int32 [n_ctx], n_ctx >= 1, the committed tokens (prompt + emitted)
 *   k   : 1 .. SD_MAX_DRAFT
 * out->n may be less than k (even 0) when the proposer runs out of context: the
 * caller then continues with the target alone. Errors: SD_ERR_ARG, and the model's.
 */
int sd_proposer_propose(sd_proposer *p, const int32_t *ctx, int32_t n_ctx, int32_t k,
                        sd_proposal *out, sd_error *err);
/*
 * A token tree of at most width x depth nodes (width * depth <= SD_MAX_DRAFT) to follow
 * ctx[0 .. n_ctx): up to `width` alternatives for the first token, each continued as a
 * chain to at most `depth` tokens (out->parent holds the shape; nodes in depth-first
 * order). One-hot (deterministic) proposers only: the tree is verified by target choice
 * (verify/: sd_verify_tree_keyed). A proposer without trees (the LLM draft) proposes its
 * chain of `depth` tokens. Errors: SD_ERR_ARG (width, depth, n_ctx), the proposer's.
 */
int sd_proposer_propose_tree(sd_proposer *p, const int32_t *ctx, int32_t n_ctx, int32_t width,
                             int32_t depth, sd_proposal *out, sd_error *err);

/*
 * Before the first proposal: process the prompt ctx[0 .. n_ctx) (e.g. fill the draft's
 * KV cache) so that the first propose call only drafts. Optional work: propose catches
 * up by itself. Errors: the model's.
 */
int sd_proposer_prefill(sd_proposer *p, const int32_t *ctx, int32_t n_ctx, sd_error *err);

/*
 * After passes without the proposer (speculation switched off): bring it up to
 * ctx[0 .. n_ctx) with bounded work. window > 0: a proposer more than `window` tokens
 * behind may restart its context as ctx[0] followed by the last `window` tokens (the LLM
 * draft does: its later proposals see that shorter context, which changes only how
 * often they are accepted, never what is emitted); window <= 0: as prefill. Errors: the
 * model's.
 */
int sd_proposer_catch_up(sd_proposer *p, const int32_t *ctx, int32_t n_ctx, int32_t window,
                         sd_error *err);

/*
 * After verification: roll the proposer's state back to the accepted prefix of
 * ctx[0 .. n_ctx) (the committed tokens). Its KV cache then holds only committed
 * tokens at contiguous positions (checked in SD_CHECKS builds).
 */
void sd_proposer_commit(sd_proposer *p, const int32_t *ctx, int32_t n_ctx);
void sd_proposer_free(sd_proposer *p); /* NULL accepted */

/* Before a new generation: use sampling settings samp and the generation's seed (an
 * LLM draft's draws are keyed by (seed, position, SD_DRAW_DRAFT), its Gumbel noise by
 * (seed, position, SD_DRAW_GUMBEL, id), the target's own noise in Gumbel mode); its KV
 * cache is kept: the next propose reuses the common prefix. */
void sd_proposer_reset(sd_proposer *p, const sd_sampling_params *samp, uint64_t seed);

/*
 * Confidence cut-off (llama.cpp --draft-p-min / --draft-min): a proposer that has a
 * confidence stops drafting at position i >= n_min when it falls below p_min, without
 * proposing that token. The LLM's confidence for a token is the top probability of its
 * row: of softmax(logits) at temperature 1 when greedy (exp(max - log-sum-exp), from the
 * row's maximum and one pass that stops once the sum shows the confidence is below
 * p_min), else of the warped row q it samples from. With a trimmed head the row is the
 * head's. p_min in [0, 1] (0: off, the default), n_min >= 0 (0: default). Proposers
 * without a confidence (n-gram) ignore it.
 */
void sd_proposer_set_cutoff(sd_proposer *p, float p_min, int32_t n_min);

/*
 * How many tokens an LLM draft may propose after a context ctx[0 .. n_ctx) (the one it
 * evaluates), at most k: its cache will hold the context and every draft but the last,
 * so fewer near the end of its n_ctx_draft positions, and none when the context holds
 * an id outside its vocabulary [0, n_vocab_draft) (the vocabularies may differ in size).
 * The LLM proposer's cap and the batcher's, so both draft as many.
 */
int32_t sd_draft_room(const int32_t *ctx, int32_t n_ctx, int32_t k, int32_t n_ctx_draft,
                      int32_t n_vocab_draft);

/*
 * Drafting one position from a draft model's logits row: the one implementation of the
 * LLM proposer (draft/llm.c, one sequence) and of the batcher (runtime/engine/batch_step.c,
 * a row per sequence of a batched draft pass), so both draft the same tokens with the same
 * cut-off. What stays the same over a generation is in the rule:
 */
typedef struct sd_draft_rule {
    const sd_sampling_params *samp; /* the generation's (logit biases, penalties, warp) */
    uint64_t seed;                  /* draws keyed (seed, position, purpose) */
    int32_t n;                      /* entries of a row */
    const int32_t *head;   /* [n] entry j is token head[j] (the trimmed head); NULL: token j */
    const int32_t *col_of; /* [n_ids] token -> entry, -1: not in the head (with head only) */
    int32_t n_ids;         /* tokens the biases and penalties index: the draft's vocabulary
                              with a head, else n */
    int32_t n_vocab_out;   /* length of a q row: the target's vocabulary (> every token) */
    float p_min;           /* confidence cut-off (llama.cpp --draft-p-min; 0: off) ... */
    int32_t n_min;         /* ... from draft index n_min on */
    /* The grammar (gram NULL: none): its state after the context and the drafts so far,
     * advanced here past each token drafted; the target's token bytes; the end ids (EOS,
     * stop ids: never drafted, the target gives them); gbits: scratch [(vocab + 63) / 64]
     * of gv. */
    sd_grammar_state *gram;
    const sd_grammar_vocab *gv;
    const int32_t *ends;
    int32_t n_ends;
    uint64_t *gbits;
    float *qrow;      /* scratch [n]: a warped row */
    int32_t *scratch; /* scratch [n] */
} sd_draft_rule;

/*
 * Draft index i after the context ctx[0 .. n_ctx) and the drafts d[0 .. i) (the
 * penalties' history; the draw's position is n_ctx + i) from the row l[0 .. x->n) (changed
 * in place): the logit biases and penalties, the grammar's mask, then greedy (temp 0) the
 * argmax (the lowest entry on ties), sampling the row warped into q, then Gumbel the
 * Gumbel-max draw keyed by (seed, position), rejection the keyed inverse-CDF draw; with
 * i >= n_min and p_min > 0 the confidence (greedy the top probability of softmax(l), sampling
 * the top of the warped row) must reach p_min. q: [n_vocab_out] the q row to fill under
 * sampling (zero outside the row; the verifier's under rejection sampling), or NULL.
 * *tok: the token drafted, or -1: drafting stops here (the grammar allows only an end id
 * or refuses the token, or the cut-off). Errors: SD_ERR_ARG (a NaN logit, a warped row
 * without a positive entry), SD_ERR_OOM (the grammar), the warp's.
 */
int sd_draft_row(const sd_draft_rule *x, float *l, const int32_t *ctx, int32_t n_ctx,
                 const int32_t *d, int32_t i, float *q, int32_t *tok, sd_error *err);

/* Most end ids (EOS, stop ids) a proposer's grammar takes. */
#define SD_DRAFT_MAX_ENDS 32

/*
 * Constrained drafting (runtime/grammar): the next proposals follow ctx's grammar state
 * `state` (after the committed tokens; not owned, read during the propose calls until it
 * is set again), over the target's token bytes gv, with the end ids ends[0 .. n_end)
 * (EOS and stop ids: never proposed). The LLM proposer masks every row it drafts from
 * (-inf for the tokens the grammar refuses, after the biases and penalties) advancing its
 * own copy of the state along its drafts, and stops drafting where nothing but an end id
 * may follow; the chain hands its LLM the state after its lookup tokens, cut at the
 * first one the grammar refuses; lookup proposers ignore it (the engine cuts their
 * proposals: sd_step_grammar_chain). state NULL, or sd_proposer_reset: unconstrained.
 * Errors: SD_ERR_ARG (n_end above SD_DRAFT_MAX_ENDS), SD_ERR_OOM.
 */
int sd_proposer_set_grammar(sd_proposer *p, const sd_grammar_state *state,
                            const sd_grammar_vocab *gv, const int32_t *ends, int32_t n_end,
                            sd_error *err);

/*
 * 1 if p chooses how many of the k tokens it may draft from what it sees (the suffix
 * proposer: by its match length and counts, or its expected rule), so a controller that
 * picks K from average per-position acceptance should let it draft up to the largest K
 * while speculation is on rather than clamp a long match to the average; 0 otherwise.
 */
int sd_proposer_sizes_itself(const sd_proposer *p);

/* The name of p's implementation ("llm", "ngram", "ngram+llm", "suffix", "suffix+llm"). */
const char *sd_proposer_name(const sd_proposer *p);

/*
 * LLM proposer over draft model m (not owned). sp: the session (its n_ctx may be
 * smaller than the target's: drafting stops gracefully near that limit). samp: the
 * sampling settings (the same as the target's, so q and p are warped alike; checked by
 * sd_sampling_check). seed: the generation's seed (see sd_proposer_reset).
 * n_vocab_target: the target's vocabulary size (0 = the draft's). The two may differ
 * by up to SD_VOCAB_MAX_SIZE_DIFF ids (as llama.cpp allows): q rows then have
 * n_vocab_target entries, the draft only proposes ids both models have (q = 0 for the
 * rest), and it proposes nothing while the context holds an id the draft lacks.
 */
int sd_proposer_llm_init(const sd_model *m, const sd_session_params *sp,
                         const sd_sampling_params *samp, uint64_t seed, int32_t n_vocab_target,
                         sd_proposer **out, sd_error *err);
/* The LLM draft's session (its weights and threads: sd_session_weights_info); NULL if p
 * is not an LLM proposer. */
const sd_session *sd_proposer_llm_session(const sd_proposer *p);

/* ---- the trimmed draft head (FR-Spec: Zhao et al. 2025, arXiv 2502.14856) ---- */

/*
 * Make the LLM draft score only the token ids ids[0 .. n) (sd_session_set_output_rows
 * on its session: its output matmul reads n rows instead of the vocabulary): q = 0 for
 * every other id, so speculative sampling stays exact by construction (and greedy and
 * Gumbel drafts simply never propose those ids). n = 0: the full head again. The ids
 * are copied. Errors: SD_ERR_ARG (p is not an LLM proposer; an id outside the ids both
 * models have; a repeated id), SD_ERR_OOM; on error p has its full head.
 */
int sd_proposer_llm_set_head(sd_proposer *p, const int32_t *ids, int32_t n, sd_error *err);
/* The trimmed head's size (0: full), or -1 if p is not an LLM proposer. */
int32_t sd_proposer_llm_head_size(const sd_proposer *p);

/*
 * FNV-1a 64 of a vocabulary (its size as 4 bytes little-endian, then every token's
 * text and its NUL): the fingerprint the lookup cache and the head files carry so a
 * file made for another vocabulary is refused.
 */
uint64_t sd_draft_vocab_fingerprint(const sd_vocab *v);

/*
 * A head file: token ids, most frequent first (scripts/draft_head.py builds one from
 * text the target generates; configs/qwen2.5-coder.head ships). Little-endian:
 *   0   8 bytes  magic "SDHEAD\0\0"
 *   8   u32      version (1)
 *   12  u32      n_vocab of the vocabulary it was made with
 *   16  u64      vocabulary fingerprint (sd_draft_vocab_fingerprint)
 *   24  u32      n_ids
 *   28  u32      0
 *   32  u32      ids[n_ids] (distinct, each < n_vocab)
 *   ..  u64      FNV-1a 64 of every byte before it
 * Load the first n_max ids (n_max <= 0: all) into a malloc'd *ids (*n of them) for the
 * vocabulary v. Errors, one line naming the file: SD_ERR_IO, SD_ERR_FORMAT (magic,
 * truncation, trailing bytes, an id out of range or repeated, checksum),
 * SD_ERR_UNSUPPORTED (version), SD_ERR_MISMATCH (another vocabulary), SD_ERR_ARG
 * (n_max above the ids the file has), SD_ERR_OOM.
 */
int sd_draft_head_load(const char *path, const sd_vocab *v, int32_t n_max, int32_t **ids,
                       int32_t *n, sd_error *err);

/* ---- n-gram / prompt lookup (ngram.c) ---- */

/* Largest n-gram size the lookup proposer indexes. */
#define SD_NGRAM_MAX 16

typedef struct sd_ngram_params {
    int32_t n_min; /* shortest n-gram matched, 1 .. n_max */
    int32_t n_max; /* longest n-gram matched (tried first), n_min .. SD_NGRAM_MAX */
    int32_t n_ctx; /* most committed tokens indexed (the capacity), >= 1 */
} sd_ngram_params;

/* n_min 2, n_max 4, n_ctx 4096. llama.cpp's lookup uses 1 .. 4 (LLAMA_NGRAM_MIN/MAX),
 * vLLM's ngram 5 .. 5, HF's prompt lookup n <= 2. On the shipped TinyStories pair
 * (greedy, K = 4, scripts/prompts/rewrite.txt) 1-token matches are accepted 13% of the
 * time and n >= 2 35%, n >= 3 56%, n_max above 4 changes nothing: 2 keeps most of the
 * matches of 1 without its misses (a compute-bound target pays for every miss). */
sd_ngram_params sd_ngram_default_params(void);

/* SD_OK, or SD_ERR_ARG naming n_min / n_max / n_ctx and the allowed range. */
int sd_ngram_check_params(const sd_ngram_params *p, sd_error *err);

/*
 * N-gram lookup proposer. For the committed context t[0 .. N) it tries n = n_max down
 * to n_min: the most recent earlier occurrence t[j - n .. j) == t[N - n .. N) (j < N)
 * gives the proposal t[j], t[j + 1], ... up to k tokens; where that runs into the end of
 * the context the match is periodic with period N - j (t[N - n .. N) == t[j - n .. j)),
 * so the proposal continues with its own tokens: nothing is ever read past the
 * context. Longest match first, then the most recent occurrence. No match: n = 0.
 * The proposal is one-hot (probs NULL).
 * Index: a hash table from (n, n-gram) to the last follower position j, with one
 * "previous position" link per (j, n), updated as tokens are committed: O(n_max) per
 * committed token, O(n_max) per lookup (plus one O(N) prefix compare per call), and a
 * rollback (commit or propose with a context that shares only a prefix with the indexed
 * one) undoes the removed positions exactly, newest first. All memory is allocated
 * here, for p->n_ctx tokens; tokens past n_ctx are not indexed (no proposal then).
 * n_vocab: the target's vocabulary (the proposal's row width). Errors: SD_ERR_ARG
 * (sd_ngram_check_params), SD_ERR_OOM.
 */
int sd_proposer_ngram_init(const sd_ngram_params *p, int32_t n_vocab, sd_proposer **out,
                           sd_error *err);

/*
 * The longest-match length of the last proposal of an n-gram proposer (0: no match),
 * or -1 if p is not one. For tests and statistics.
 */
int32_t sd_proposer_ngram_last_match(const sd_proposer *p);

/*
 * The length of the last proposal's match in the context, extended backwards past the
 * n-gram: the largest len <= cap (at least the n-gram's n) with t[j - len .. j) ==
 * t[N - len .. N) for the occurrence j it copied (O(cap)); -1 if p is not an n-gram
 * proposer or its last proposal was none or came from the lookup cache. Valid until the
 * next propose or commit. The chain's measure of how far the match can be trusted.
 */
int32_t sd_proposer_ngram_last_extent(const sd_proposer *p, int32_t cap);

/* ---- persistent lookup cache (ngram_cache.c) ---- */

/*
 * An n-gram cache kept across runs (as llama.cpp's lookup caches): the token sequences
 * of earlier runs (prompt + output, one "document" each), indexed like the context. An
 * n-gram proposer with a cache attached looks there when the context has no match,
 * and proposes what followed the most recent occurrence, up to the end of its document.
 *
 * File (little-endian):
 *   0   8 bytes  magic "SDNGRAM\0"
 *   8   u32      version (1)
 *   12  u32      n_vocab of the vocabulary it was made with
 *   16  u64      vocabulary fingerprint (sd_draft_vocab_fingerprint)
 *   24  u32      n_docs
 *   28  u32      0
 *   32  u64      n_tokens (sum of the document lengths)
 *   40  u32      doc_len[n_docs]
 *   ..  i32      tokens[n_tokens] (ids in [0, n_vocab))
 *   ..  u64      FNV-1a 64 of every byte before it
 * Written to PATH.tmp.PID, flushed to disk and renamed over PATH, so PATH is either the
 * old file or the new one, never half of one.
 */
typedef struct sd_ngram_cache sd_ngram_cache;

/* Most tokens a cache holds by default (older documents are dropped first). */
#define SD_NGRAM_CACHE_TOKENS 65536

/* An empty cache for a vocabulary (fingerprint, n_vocab), n-gram sizes of np (its
 * n_ctx is ignored), at most max_tokens tokens (0: SD_NGRAM_CACHE_TOKENS).
 * Errors: SD_ERR_ARG, SD_ERR_OOM. */
int sd_ngram_cache_init(uint64_t fingerprint, int32_t n_vocab, const sd_ngram_params *np,
                        int64_t max_tokens, sd_ngram_cache **out, sd_error *err);

/*
 * Load path for the vocabulary (fingerprint, n_vocab). Errors, one line naming the file:
 * SD_ERR_IO (cannot open or read: a missing file is errno ENOENT, which a caller may
 * take as "start empty"), SD_ERR_FORMAT (not a cache: bad magic; truncated: expected vs
 * found bytes; trailing bytes; lengths that do not add up; an id out of range; a bad
 * checksum), SD_ERR_UNSUPPORTED (another version), SD_ERR_MISMATCH (made with another
 * vocabulary), SD_ERR_OOM. Documents beyond max_tokens: the newest are kept.
 */
int sd_ngram_cache_load(const char *path, uint64_t fingerprint, int32_t n_vocab,
                        const sd_ngram_params *np, int64_t max_tokens, sd_ngram_cache **out,
                        sd_error *err);

/* Append a document toks[0 .. n) (ids in [0, n_vocab)); the oldest documents go when the
 * cache would pass its size. Errors: SD_ERR_ARG (bad id), SD_ERR_OOM; on error the cache
 * is unchanged. */
int sd_ngram_cache_add(sd_ngram_cache *c, const int32_t *toks, int32_t n, sd_error *err);

/* Write the cache to path atomically (see the format). path must be a regular file or
 * absent. Errors: SD_ERR_IO (naming the file), SD_ERR_ARG (not a regular file); on error
 * path is unchanged and no temporary file is left. */
int sd_ngram_cache_save(const sd_ngram_cache *c, const char *path, sd_error *err);

int32_t sd_ngram_cache_n_docs(const sd_ngram_cache *c);
int64_t sd_ngram_cache_n_tokens(const sd_ngram_cache *c);
void sd_ngram_cache_free(sd_ngram_cache *c); /* NULL accepted */

/* Attach c (not owned; NULL detaches) to the n-gram proposer p. Errors: SD_ERR_ARG if p
 * is not an n-gram proposer or c's n-gram sizes differ from p's. */
int sd_proposer_ngram_set_cache(sd_proposer *p, const sd_ngram_cache *c, sd_error *err);

/* ---- suffix-structure proposer (suffix.c) ---- */

/*
 * SuffixDecoding-style drafting (Oliaro et al. 2024, arXiv 2411.04975): an index of every
 * suffix of the committed text (prompt + generated tokens), grown one token at a time,
 * that gives the longest match of the text's end with an earlier position and how often
 * each continuation followed the matched text there. The proposal is the most frequent
 * continuation chain: from the match of length m, at most min(k, max_spec_factor * m)
 * tokens, each the token that most often followed (ties: the most recent occurrence),
 * stopping before the chain's empirical probability (the product over its tokens of
 * count(token) / count(all followers)) falls below min_token_prob. Deterministic, so
 * the proposal is one-hot (probs NULL), verified like an n-gram draft.
 */
typedef enum sd_suffix_rule {
    /* The paper's: at most max_spec_factor x m tokens, stopping before the chain's
     * empirical probability falls below min_token_prob. */
    SD_SUFFIX_RULE_FACTOR = 0,
    /* Expected tokens per unit cost: token i of the chain is accepted (its predecessors
     * accepted) with a probability a_i learned during the generation from the outcome of
     * earlier drafts, per (source: context or cache; the match length m + i at that token,
     * in buckets; whether its follower was the only one), starting from a prior for each
     * bucket; the draft is the prefix of n tokens (0 .. k) that maximises
     * (1 + sum_{i<=n} prod_{j<=i} a_j) / (1 + draft_cost x n): the expected tokens a
     * target pass emits over its cost, a pass of n + 1 tokens costing 1 + draft_cost x n
     * one-token passes. A long match of a text the target has been copying drafts all k;
     * a short or ambiguous one little or nothing. max_spec_factor and min_token_prob are
     * not used. */
    SD_SUFFIX_RULE_EXPECTED = 1,
} sd_suffix_rule;

typedef struct sd_suffix_params {
    float max_spec_factor; /* tokens drafted per token of match length, > 0 (factor rule) */
    float min_token_prob;  /* stop before the chain's probability falls below this, 0 .. 1
                              (factor rule) */
    int32_t n_min;         /* shortest match that drafts, >= 1 */
    int32_t n_ctx;         /* most committed tokens indexed (the capacity), >= 1 */
    sd_suffix_rule rule;   /* how many tokens a match drafts (0: the factor rule) */
    float draft_cost;      /* expected rule: a drafted token's share of a one-token target
                              pass, the slope of v(n) (0 .. 16; 0 in a zeroed struct: 0.25) */
    int32_t resume;        /* factor rule: after the target leaves a copy of >= 6 tokens for
                              one token (it rejected a drafted token, or emitted its own after
                              a fully accepted draft), draft up to this many tokens (more after
                              resumed drafts accepted whole) from where the copied text goes on
                              past the replaced token, while the match is shorter than the copy
                              and its proposal shorter than that;
                              a replaced token is written as the target wrote it in later
                              proposals until it is rejected (a rename); 0 .. SD_MAX_DRAFT,
                              0: off */
} sd_suffix_params;

/* max_spec_factor 1, min_token_prob 0.1 (the paper's and vLLM's defaults), n_min 2 (as the
 * n-gram proposer's shortest n-gram), n_ctx 4096, the factor rule; draft_cost 0.25 for the
 * expected rule (a pass of n tokens costs about 0.7 + 0.3 n one-token passes for
 * SmolLM2-135M and 0.8 + 0.2 n for Qwen2.5-Coder-1.5B on the 2-core AVX-512 CPU; on these
 * CPUs the two rules draft about as well: docs/drafting.md); resume 2 (docs/drafting.md, fifth
 * round). */
sd_suffix_params sd_suffix_default_params(void);

/* SD_OK, or SD_ERR_ARG naming the field and the allowed range. */
int sd_suffix_check_params(const sd_suffix_params *p, sd_error *err);

/*
 * The suffix proposer. All memory is allocated here, for p->n_ctx tokens (about 170
 * bytes a token: sd_suffix_index_bytes); past n_ctx committed tokens it proposes nothing.
 * Its index holds only committed tokens: commit and propose append the tokens that extend
 * it (O(log N) amortised each); a context that does not extend them (a new generation)
 * rebuilds it from the common prefix. n_vocab: the target's vocabulary (the proposal's
 * row width). Errors: SD_ERR_ARG (sd_suffix_check_params), SD_ERR_OOM.
 */
int sd_proposer_suffix_init(const sd_suffix_params *p, int32_t n_vocab, sd_proposer **out,
                            sd_error *err);

/* The match length of the last proposal of a suffix proposer (0: none), or -1 if p is not
 * one. For tests and statistics. */
int32_t sd_proposer_suffix_last_match(const sd_proposer *p);

/*
 * The index itself (a suffix automaton whose suffix-link tree is kept as a link-cut tree
 * for the occurrence counts; see suffix.c), over a text t[0 .. N) of ids >= 0, N <= cap.
 * init: an empty index for cap tokens (1 .. about 7e8). Errors: SD_ERR_ARG, SD_ERR_OOM.
 * append: add one token (O(1) amortised for the automaton, O(log N) amortised for the
 * counts); -1 if full or tok < 0 (nothing changes). truncate: keep t[0 .. n_keep) (a
 * rebuild: O(n_keep log n_keep)). clear: empty.
 * match: the largest m < N such that t[N - m .. N) also ends at an earlier position e < N
 * (t[e - m .. e) == t[N - m .. N)); 0 if none.
 * count: the occurrences of q[0 .. n) in t (n >= 1; overlapping ones count), *last the end
 * position e of the most recent (0 if none).
 * propose: the proposal described above for k (1 .. SD_MAX_DRAFT) into tokens[k]; *match
 * the match length, *prob the chain's empirical probability (each may be NULL).
 */
typedef struct sd_suffix_index sd_suffix_index;
int sd_suffix_index_init(int32_t cap, sd_suffix_index **out, sd_error *err);
void sd_suffix_index_free(sd_suffix_index *ix); /* NULL accepted */
void sd_suffix_index_clear(sd_suffix_index *ix);
int sd_suffix_index_append(sd_suffix_index *ix, int32_t tok);
void sd_suffix_index_truncate(sd_suffix_index *ix, int32_t n_keep);
int32_t sd_suffix_index_n_tokens(const sd_suffix_index *ix);
int32_t sd_suffix_index_capacity(const sd_suffix_index *ix);
const int32_t *sd_suffix_index_tokens(const sd_suffix_index *ix);
size_t sd_suffix_index_bytes(const sd_suffix_index *ix);
int32_t sd_suffix_index_match(const sd_suffix_index *ix);
int64_t sd_suffix_index_count(sd_suffix_index *ix, const int32_t *q, int32_t n, int32_t *last);
int32_t sd_suffix_index_propose(sd_suffix_index *ix, const sd_suffix_params *p, int32_t k,
                                int32_t *tokens, int32_t *match, float *prob);

/* ---- cross-request suffix cache (suffix_cache.c) ---- */

/*
 * Earlier requests' token sequences (prompt + output, one document each) in one suffix
 * index, for a server's suffix proposers (SuffixDecoding's global tree): a proposer with
 * the cache attached also proposes from the cache (the longest match of the context's
 * last 64 tokens there, continued as in the context, never across a document's end) and
 * takes the cache's proposal when it scores higher (the score of a chain: the sum of its
 * probability up to each token, its expected accepted length under the counts).
 * Memory: fixed when the cache is made, at most max_bytes (sd_suffix_cache_bytes) for
 * every number of documents added; a document that does not fit drops the least
 * recently used documents (added, or a proposal's source) until a quarter of the
 * capacity is free besides it, and the index is rebuilt from the rest (a pause of
 * O(capacity log capacity), at most once per quarter of the capacity added). A document
 * longer than the capacity keeps its newest tokens. Not thread-safe: one thread (the
 * batcher's stepping thread) adds and proposes.
 */
typedef struct sd_suffix_cache sd_suffix_cache;

/* An empty cache for ids [0, n_vocab) in at most max_bytes. Errors: SD_ERR_ARG (n_vocab;
 * max_bytes too small for 16 tokens), SD_ERR_OOM. */
int sd_suffix_cache_init(int32_t n_vocab, size_t max_bytes, sd_suffix_cache **out, sd_error *err);
void sd_suffix_cache_free(sd_suffix_cache *c); /* NULL accepted */
/* Add a document toks[0 .. n). Errors: SD_ERR_ARG (an id outside [0, n_vocab): the cache
 * is unchanged), SD_ERR_OOM. */
int sd_suffix_cache_add(sd_suffix_cache *c, const int32_t *toks, int32_t n, sd_error *err);
int32_t sd_suffix_cache_n_docs(const sd_suffix_cache *c);
int64_t sd_suffix_cache_n_tokens(const sd_suffix_cache *c);
int32_t sd_suffix_cache_capacity(const sd_suffix_cache *c); /* tokens + one per document */
size_t sd_suffix_cache_bytes(const sd_suffix_cache *c);     /* allocated, <= max_bytes */
/* The cache's proposal for the context ctx[0 .. n_ctx) (see above): tokens[k], *match the
 * match length, *score its score. */
int32_t sd_suffix_cache_propose(sd_suffix_cache *c, const int32_t *ctx, int32_t n_ctx,
                                const sd_suffix_params *p, int32_t k, int32_t *tokens,
                                int32_t *match, double *score);
/* Attach c (not owned, NULL detaches) to the suffix proposer p. Errors: SD_ERR_ARG (p is
 * not a suffix proposer). */
int sd_proposer_suffix_set_cache(sd_proposer *p, sd_suffix_cache *c, sd_error *err);
/*
 * Byte-level matching for the suffix proposer p: tv holds the target vocabulary's token
 * bytes (sd_grammar_vocab; not owned, outlives p; NULL detaches). Where the token-level
 * match drafts nothing (the same text tokenized differently: an edit boundary, a code
 * fence), p finds the token boundary of the committed text whose preceding bytes share the
 * longest suffix with the text's bytes, and when those bytes cover more of the text's last
 * tokens than the token match (mb of them, at least n_min, at least 4 bytes) drafts the
 * tokens that followed that boundary, at most min(k, max_spec_factor x mb): aligned to the
 * current token boundary, so a proposal is still one-hot and only ever verified. Memory:
 * about 20 bytes per token of p's n_ctx, allocated here. Errors: SD_ERR_ARG (p is not a
 * suffix proposer), SD_ERR_OOM.
 */
int sd_proposer_suffix_set_bytes(sd_proposer *p, const sd_grammar_vocab *tv, sd_error *err);
/* Proposals p took from a byte match, or -1 if p is not a suffix proposer. */
int64_t sd_proposer_suffix_byte_hits(const sd_proposer *p);
/* Proposals p took from its cache, or -1 if p is not a suffix proposer. */
int64_t sd_proposer_suffix_cache_hits(const sd_proposer *p);

/* ---- chained drafting (chain.c) ---- */

/*
 * A lookup proposer (`first`: n-gram or suffix) continued by a second one (the LLM draft)
 * in the same block. The first's proposal is kept up to the length of its match
 * (sd_chain_lookup_keep: the suffix proposer bounds its proposal so itself; the n-gram
 * proposer, which continues any match of n tokens for all k, is cut to its match extended
 * backwards, sd_proposer_ngram_last_extent: SuffixDecoding's rule, at most as many tokens
 * as the match is long). For a block of k, with m the tokens kept:
 *   m >= k: the first's proposal alone;
 *   it proposes none: the second's proposal alone;
 *   0 < m < k: the m tokens, then up to k - m tokens the second proposes after the context
 *   extended by them (so an LLM draft first evaluates the m tokens, with the context's
 *   last token, in one batched pass that leaves its KV cache in step, then drafts
 *   autoregressively; its positions, penalty history and keyed draws are those of the
 *   extended context). The second proposing nothing leaves the m tokens.
 * One target pass verifies the whole block. Exact in every mode: the m tokens are one-hot;
 * greedy and Gumbel LLM drafts are one-hot too (the block is one_hot); with rejection
 * sampling the block carries q rows, one-hot rows (1 at the token) for the m lookup tokens
 * and the LLM's rows after them, which sd_verify_keyed treats exactly as sd_verify_onehot
 * treats a one-hot token (accept x with probability p(x); on rejection draw from p with x
 * removed), so a mixed block is speculative sampling with a q that is a point mass on
 * some rows. A mixed proposal has lookup = 0 (a lookup-only pass in the statistics is
 * one the first made alone).
 * prefill, commit (the rollback to the accepted prefix: both proposers roll back,
 * an LLM draft's KV cache to the committed tokens), reset and set_cutoff go to both. The
 * second's cut-off counts its own tokens (n_min of them before it applies).
 * Neither is owned (free them after the chain). name: the chain's name (static string,
 * e.g. "ngram+llm"). Memory: the extended context (grows to the longest context seen)
 * and, with rejection sampling, SD_MAX_DRAFT q rows, allocated at the first proposal
 * that needs them. Errors: SD_ERR_ARG (NULL proposer), SD_ERR_OOM.
 */
int sd_proposer_chain_init(sd_proposer *first, sd_proposer *second, const char *name,
                           sd_proposer **out, sd_error *err);

/*
 * Limits that let one block carry a long lookup and a short draft-model tail (the block's
 * k then caps the lookup, e.g. 16, while the draft model, whose tokens cost a fraction of
 * a target step each, drafts few): second_max > 0, the second proposes at most second_max
 * tokens (after m kept lookup tokens: min(k - m, second_max); alone: min(k, second_max));
 * long_match > 0, a lookup of m >= long_match kept tokens drafts alone (no tail: past a long
 * match the target usually keeps copying, and the tail would cost draft steps for tokens the
 * next pass's lookup drafts for free). 0 for either: the block's k (the behaviour above).
 * Verification is unchanged (the block is a chain of one-hot or q rows, as above).
 * Errors: SD_ERR_ARG (p not a chain, a limit outside 0 .. SD_MAX_DRAFT).
 */
int sd_proposer_chain_set_limits(sd_proposer *p, int32_t second_max, int32_t long_match,
                                 sd_error *err);

/* How many of the m tokens `first` just proposed for a block of k a chain keeps (the
 * batcher's chained drafting uses it too): an n-gram proposal is cut to
 * sd_proposer_ngram_last_extent(first, k) when shorter; others are kept whole. */
int32_t sd_chain_lookup_keep(const sd_proposer *first, int32_t m, int32_t k);

/* Proposals of a chain since it was made: by the first alone (n_first), the second alone
 * (n_second), and mixed (n_mixed, with n_mixed_lookup tokens of the first and
 * n_mixed_second of the second in them). */
typedef struct sd_chain_counts {
    int64_t n_first, n_second, n_mixed;
    int64_t n_mixed_lookup, n_mixed_second;
} sd_chain_counts;

/* *out = p's counts; -1 (zeros) if p is not a chain. For tests and statistics. */
int sd_proposer_chain_counts(const sd_proposer *p, sd_chain_counts *out);

#ifdef __cplusplus
}
#endif
#endif /* SD_DRAFT_H */
