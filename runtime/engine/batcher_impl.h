/*
 * runtime/engine/batcher_impl.h: PRIVATE to runtime/engine. The batcher's records shared
 * by batcher.c (the face: init, submit, cancel, stats), batch_step.c (a step: admission,
 * proposals, the passes, verification and commit through step.c) and batch_out.c (a
 * choice's text: streaming detokenization, stop strings, events). See sd_engine.h for what a
 * batcher does.
 */
#ifndef SD_BATCHER_IMPL_H
#define SD_BATCHER_IMPL_H

#include <pthread.h>

#include "runtime/engine/sd_engine.h"
#include "runtime/engine/step.h"

typedef enum choice_state {
    CH_WAIT = 0, /* queued, or (choices after the first) waiting for the prompt's fork */
    CH_PREFILL,  /* the target is evaluating the prompt */
    CH_DECODE,   /* generating */
    CH_DONE,
} choice_state;

typedef struct sd_req sd_req;

/* One sequence: a choice of a request. */
typedef struct sd_choice {
    sd_req *r;
    int32_t index;
    int32_t slot; /* sequence id in the sessions, -1 when none */
    choice_state state;
    int32_t *ctx; /* [cap] committed tokens: the prompt, then what was emitted */
    int32_t n_ctx, cap;
    int32_t n_emitted_sent; /* ctx index up to which ids were given to the callback */
    sd_proposer *ngram;     /* own n-gram proposer (n-gram draft types), or NULL */
    sd_adaptive ctl;        /* the one controller (adaptive.c), in batch mode beside others */
    int adaptive;
    sd_adaptive_state ctl_state; /* the controller's state before this step's pass */
    int32_t k_policy;            /* this step's K of the policy, before the caps */
    int32_t k_want_cap;          /* ... capped by the budget and the context */
    int32_t quota_t, quota_d;    /* worst-case blocks of the target / draft pool */
    sd_detok *detok;
    char *text; /* the generated text so far ([text_len]), given up to text_sent */
    size_t text_len, text_cap, text_sent;
    sd_gen_stats st;
    sd_token_logprob *lp; /* [gp.n_predict] the emitted tokens' logprobs (gp.logprobs), or NULL */
    int32_t out0;         /* the output index of ctx[r->n_prompt] (tokens emitted before a
                             context shift; 0 without one) */
    int32_t n_shifts;     /* context shifts so far (gp.context_shift: batch_step.c) */
    int first_done;       /* the first token was emitted */
    int failed;           /* out of memory for its text: ended with stop NONE */
    sd_stop_reason stop;
    /* This step's proposal and rows. */
    int32_t k;                     /* tokens drafted */
    int32_t dtok[SD_MAX_DRAFT];    /* the draft tokens */
    int32_t k_lookup;              /* dtok[0 .. k_lookup): a chain's lookup tokens, which
                                      the LLM continues (0: none, or not chained) */
    float *q;                      /* [k_max, n_vocab] the LLM draft's warped rows */
    int one_hot;                   /* the proposal is lookup tokens only (n-gram, suffix) */
    int tree;                      /* the proposal is a token tree (gp.tree_width: n-gram,
                                      suffix), scored in the step's one pass */
    int32_t dpar[SD_MAX_DRAFT];    /* a tree's parents: dtok[i]'s (-1: the context) */
    int32_t k_want;                /* K asked of the LLM draft this step */
    int llm;                       /* drafting with the LLM this step (still drafting) */
    int used_llm;                  /* the LLM drafted for it this step */
    int32_t drow;                  /* its row in the current draft pass, -1: none */
    int32_t row0, n_rows;          /* its logits rows in the target pass */
    int32_t prefill_n;             /* prompt tokens in the target pass (prefill) */
    int in_pass;                   /* takes part in this step's target pass */
    double t_draft_ms, c_draft_ms; /* drafting time this step (wall, thread clock) */
    /* The LLM draft's view of the context after a windowed catch-up (SD_CATCHUP_WINDOW,
     * as draft/llm.c's): ctx[0], then ctx[doff + 1 ..]; doff 0: the context itself.
     * dview [cap]: the view's tokens (adaptive LLM choices), made by draft_view. */
    int32_t doff;
    int32_t *dview;
    int32_t n_ctx_drafted; /* the context when the LLM last drafted for it */
    int catchup;           /* this step catches the draft up after target-alone passes */
    int catchup_expensive; /* a full catch-up cost more than SD_CATCHUP_BUDGET per token */
    /* The grammar (r->grammar): the state after the committed tokens, and after this
     * step's drafts so far (the LLM draft rows' masks); NULL both: none. */
    sd_grammar_state *gseq, *gdraft;
    /* The LLM draft's rule for its rows (sd_draft_row; made with its first row: samp NULL
     * until then) and the end ids it points to. */
    sd_draft_rule drule;
    int32_t dends[SD_MAX_STOP_IDS + 1];
} sd_choice;

struct sd_req {
    int64_t id;
    sd_gen_params gp; /* with the vocabulary's end-of-generation ids among the stop ids;
                         gp.samp.logit_bias points to bias, the request's own copy */
    sd_logit_bias *bias;
    char *stop[SD_MAX_STOP_STRINGS];
    size_t stop_len[SD_MAX_STOP_STRINGS];
    int32_t n_stop;
    int32_t *prompt; /* the submitted prompt (admission's prefix-cache lookup) */
    /* The prompt of the current segment, ch[0].ctx[0 .. n_prompt): the submitted one, or
     * after a context shift the shortened window (the prompt figures of the statistics
     * stay the first's). */
    int32_t n_prompt;
    int32_t n_keep; /* gp.context_shift: the first tokens every shift keeps */
    int32_t n_choices;
    sd_choice *ch; /* [n_choices] */
    sd_req_cb cb;
    void *user;
    int progress;        /* prompt-progress events asked (sd_request.progress) */
    int progress_sent;   /* the admission's progress event went out */
    int cancel;          /* set under the mutex by sd_batcher_cancel */
    int n_done;          /* choices done */
    double t_submit;     /* ms, sd_time_ms */
    sd_grammar *grammar; /* gp.grammar compiled (gp.grammar is then NULL), or NULL */
    int stop_at_context; /* sd_request.stop_at_context */
    sd_req *next;        /* the queue */
};

#define SD_RATE_SAMPLES 64

struct sd_batcher {
    sd_engine *e;
    const sd_model *tm, *dm;
    const sd_vocab *vocab;
    sd_batcher_params p;
    sd_session *ts, *ds; /* target and draft sessions (paged, n_parallel sequences) */
    int32_t n_ctx, n_ctx_d;
    int32_t n_vocab, n_vocab_d, n_common; /* target, draft, ids both have */
    int32_t eos;
    sd_ngram_params ngram_params;
    sd_proposer **ngram;           /* [n_parallel] an n-gram proposer per slot */
    sd_proposer **suffix;          /* [n_parallel] a suffix proposer per slot */
    sd_suffix_cache *suffix_cache; /* earlier requests, for the suffix proposers; or NULL */
    float **q;         /* [n_parallel] per slot [k_max, n_vocab] draft rows (with a draft) */
    int32_t n_out;     /* target logits rows per pass */
    sd_choice **slots; /* [n_parallel] the choice in each sequence slot, NULL: free */
    sd_req *q_head, *q_tail;
    int32_t n_queued;
    sd_req **running; /* [n_parallel] admitted requests, in admission order */
    int32_t n_running;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int64_t next_id;
    int closed, cancel_all;
    /* Target pass buffers. */
    int32_t *btok, *bseq;
    int32_t *bpar; /* each row's parent in its run (sd_session_decode_trees): token trees */
    int8_t *bwant;
    float *logits; /* [n_out, n_vocab] */
    float *probs;  /* [k_max + 1, n_vocab] warped target rows */
    float *raw;    /* [k_max + 1, n_vocab] the model's rows, for logprobs (step.c); made
                      when the first request asking for logprobs is verified */
    sd_token_logprob lp[SD_MAX_DRAFT + 1]; /* a pass's committed tokens' logprobs */
    float *residual;                       /* [n_vocab] */
    int32_t *iscratch;                     /* [max(n_vocab, n_vocab_d)] */
    /* Draft pass buffers. */
    int32_t n_batch_d;
    int32_t *dbtok, *dbseq;
    int8_t *dbwant;
    float *dlogits; /* [n_parallel, n_dlog] */
    int32_t n_dlog; /* entries of a draft logits row: n_dhead, or the draft's n_vocab */
    /* The trimmed draft head (sd_engine_params.draft_head, as generate's LLM proposer):
     * draft row entry j is token dhead[j], dcol_of maps a draft id to its entry (-1: not
     * in the head); n_dhead 0: the full head (entry j = token j, j < n_common). */
    int32_t n_dhead;
    int32_t *dhead;   /* [n_dhead] */
    int32_t *dcol_of; /* [n_vocab_d] */
    float *dqrow;     /* [n_common] a warped draft row (sampling; sd_draft_rule.qrow) */
    /* The adaptive K's batch cost (sd_adaptive_batch): target pass ms over its tokens. */
    sd_cost_fit tfit;
    /* Statistics (under mu). */
    sd_batcher_stats st;
    double rate_t[SD_RATE_SAMPLES];
    int64_t rate_n[SD_RATE_SAMPLES];
    int32_t rate_i;
    /* Grammar scratch (allocated with the first request that has one): a pass's chain
     * of states (sd_step_grammar_chain) and a mask [(n_vocab + 63) / 64]. */
    sd_grammar_state *gchain[SD_MAX_DRAFT + 1];
    uint64_t *gbits;
};

/* batcher.c */
void sd_req_free(sd_req *r);
/* The choice's sequences return their blocks (stored in the prefix cache first when
 * store); the slot is freed. */
void sd_batcher_release(sd_batcher *b, sd_choice *c, int store);

/* batch_out.c */
/* The text of choice c's tokens ctx[first_new .. n_ctx), just committed (step.c's
 * sd_step_commit, which set the stop of a stop id or the budget): streaming
 * detokenization, stop strings (c->stop becomes STRING at one), the first token's time. */
void sd_choice_text(sd_batcher *b, sd_choice *c, int32_t first_new);
/* Give the callback what is new for c (ids, final text, done). Returns the callback's
 * value (non-zero: cancel the request). */
int sd_choice_event(sd_batcher *b, sd_choice *c);
/* A prompt-progress event of choice c (0) of a request that asked (sd_req_event.progress):
 * n_processed positions of its prompt are in the target's cache; the callback's value. */
int sd_choice_progress(sd_batcher *b, sd_choice *c, int32_t n_processed);
/* End choice c with reason stop (flushes its text, sends the done event, releases its
 * sequences). */
void sd_choice_finish(sd_batcher *b, sd_choice *c, sd_stop_reason stop);

#endif /* SD_BATCHER_IMPL_H */
