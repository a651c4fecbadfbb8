/*
 * specdec.h: the public face of the specdec library (speculative decoding of
 * llama-family GGUF models on the CPU, or a GPU with the CUDA module).
 *
 * One header, plain C11 (and C++: every declaration is extern "C"), no other include of
 * the project. A program that uses the library includes this file only and links
 * -lspecdec (`pkg-config --cflags --libs specdec` after `cmake --install`).
 *
 *   sd_context   a loaded target model and, optionally, a draft model that pairs with it
 *                (same tokenizer); the weights are mapped once and shared by everything
 *                made from the context.
 *   sd_complete  one prompt -> text, with a callback per block of emitted tokens: the
 *                speculative loop (draft K tokens, one target pass over them, accept a
 *                prefix, emit one more), whose greedy output equals the target's alone.
 *   sd_queue     many prompts at once (continuous batching): submit, then step until
 *                nothing is busy; each step advances every running request by one pass
 *                and calls its callback with what it emitted. Cancel at any time.
 *   sd_gen_stats the statistics of one completion (one definition for every client:
 *                the CLI's output and --json, `specdec bench`, the server).
 *   sd_error     every function that can fail returns an sd_status (0 = SD_OK) and, given
 *                a non-NULL sd_error, fills it with one printable line naming the file,
 *                the field and what was expected.
 *
 * Threads: a context may be used by one thread at a time; sd_queue_submit,
 * sd_queue_cancel and sd_queue_busy may be called from any thread while another thread
 * runs sd_queue_step (the callbacks run on the stepping thread).
 * Examples: examples/simple.c (load a pair, generate, print the statistics) and
 * examples/batch.c (several prompts through one queue).
 */
#ifndef SPECDEC_H
#define SPECDEC_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- errors ---- */

/* The kind of a failure. */
typedef enum sd_status {
    SD_OK = 0,
    SD_ERR_IO = 1,          /* open/read/write/mmap/rename failed */
    SD_ERR_FORMAT = 2,      /* malformed file (GGUF, llama2.c checkpoint, JSON) */
    SD_ERR_UNSUPPORTED = 3, /* well-formed but not supported (tensor type, architecture) */
    SD_ERR_OOM = 4,         /* allocation failed */
    SD_ERR_ARG = 5,         /* bad argument from the caller/user (-k 0, unknown flag) */
    SD_ERR_MISMATCH = 6,    /* draft and target do not pair (vocabulary) */
    SD_ERR_CONTEXT = 7,     /* context full: prompt too long or KV cache out of room */
    SD_ERR_CONFIG = 8,      /* bad config file key/value */
    SD_ERR_BUSY = 9,        /* a queue is full: try again later (a server's 503) */
} sd_status;

#define SD_ERROR_MSG_MAX 512

/* The error record: status plus one printable line (no newline). Zero-initialise before
 * use (sd_error err = {0};); a call that fails overwrites it, one that succeeds leaves it
 * as it was. */
typedef struct sd_error {
    sd_status status;
    char msg[SD_ERROR_MSG_MAX];
} sd_error;

/* Short name of a status ("ok", "io error", ...). Never NULL. */
const char *sd_status_str(sd_status st);

/* ---- statistics ---- */

/* Longest draft of a speculative step (K <= SD_MAX_DRAFT). */
#define SD_MAX_DRAFT 16

/* Why a completion ended. */
typedef enum sd_stop_reason {
    SD_STOP_NONE = 0,   /* not ended (yet), or stopped by the callback / an error */
    SD_STOP_EOS,        /* the model's end of text or end of turn (not emitted) */
    SD_STOP_MAX_TOKENS, /* n_predict tokens emitted */
    SD_STOP_CONTEXT,    /* the context is full */
    SD_STOP_STRING,     /* a stop string appeared (sd_queue) */
    SD_STOP_CANCEL,     /* cancelled (sd_queue_cancel, or the callback asked) */
    SD_STOP_GRAMMAR,    /* the request's grammar allows no token (nor the end) here */
} sd_stop_reason;

/* "none", "eos", "max_tokens", "context", "stop", "cancelled", "grammar". */
const char *sd_stop_reason_str(sd_stop_reason r);

/*
 * The statistics of one completion (the derived figures are the sd_stats_* functions):
 *   acceptance_rate  = n_accepted / n_drafted
 *   tokens_per_pass  = (n_generated + n_stop_tokens) / n_target_passes: the tokens the
 *                      passes decided, the stop token that ended the run included
 *   per-position i   = accepted at draft position i / drafted at draft position i
 *   times            = ms from the start (sd_complete's call; a queued request's
 *                      submission, so its times include its wait in the queue)
 * Counts cover only emitted tokens: an EOS inside an accepted block ends the output
 * there, and accepted tokens after it are not counted as accepted.
 */
typedef struct sd_gen_stats {
    int32_t n_prompt;
    /* Of them, positions not evaluated again: the batcher's prefix-cache hit (whole
     * blocks), or in sd_engine_generate the prefix the target's cache kept from the
     * engine's last run (a chat turn after the previous one) */
    int32_t n_prompt_cached;
    int32_t n_generated;
    int32_t n_target_passes; /* verification passes (decode steps when target alone) */
    int32_t n_stop_tokens;   /* 1 when an EOS / stop token ended the run (not emitted) */
    int32_t n_drafted;
    int32_t n_accepted;
    int32_t drafted_at[SD_MAX_DRAFT];  /* drafted at draft position i */
    int32_t accepted_at[SD_MAX_DRAFT]; /* accepted (and emitted) at draft position i */
    double t_prefill_ms; /* from the start until decoding began (the prompt evaluated) */
    double t_draft_ms;
    double t_verify_ms; /* target verification passes */
    double t_sample_ms; /* warping + rejection sampling */
    double t_total_ms;  /* from the start to the end of the run */
    double ttft_ms;     /* from the start to the first emitted token */
    double t_first_ms;  /* the same (kept for the callers that read it) */
    sd_stop_reason stop;
    /* K over the run: k_hist[k] = passes that drafted k tokens (0: a pass of the target
     * alone: speculation off, calibration, no draft, or a proposer that had nothing). */
    int32_t k_hist[SD_MAX_DRAFT + 1];
    int32_t n_off_passes; /* target-alone passes while the auto-off switch was off */
    double t_off_ms;      /* their time (target passes and sampling) */
    int32_t n_switch_off; /* times the switch turned speculation off */
    int32_t n_probes;     /* re-probe passes while off */
    /* Passes whose proposal was one-hot (n-gram lookup), and its tokens. */
    int32_t n_passes_lookup, n_drafted_lookup, n_accepted_lookup;
} sd_gen_stats;

/* Derived figures: 0 when the denominator is 0 (nothing drafted, no pass: the CLI
 * prints "-" and JSON null then). */
double sd_stats_acceptance_rate(const sd_gen_stats *s);
/* Accepted / drafted at draft position i (0-based, < SD_MAX_DRAFT). */
double sd_stats_accept_at(const sd_gen_stats *s, int32_t i);
/* Mean K over the passes (k_hist). */
double sd_stats_mean_k(const sd_gen_stats *s);
/* Tokens a pass decided, the stop token included (n_generated + n_stop_tokens) /
 * n_target_passes: >= 1, since every pass emits at least one token or the stop. */
double sd_stats_tokens_per_pass(const sd_gen_stats *s);
/* Add the counts and times of s to sum (figures over several runs or choices: the
 * derived figures of the sum are then the ones of the whole). */
void sd_stats_add(sd_gen_stats *sum, const sd_gen_stats *s);
/* Emitted tokens per second over the decode phase (n_generated / (t_total - t_prefill)). */
double sd_stats_tokens_per_s(const sd_gen_stats *s);
/* Mean inter-token latency in ms: (t_total - t_first) / (n_generated - 1). */
double sd_stats_itl_ms(const sd_gen_stats *s);

/* ---- a context: the models ---- */

typedef struct sd_context sd_context;

typedef struct sd_context_params {
    const char *target; /* target GGUF path (required) */
    const char *draft;  /* draft GGUF path, or NULL: target alone (n-gram and suffix
                           drafting still work: they need no draft model) */
    int32_t n_ctx;      /* positions of the context; 0: the target's training context */
    int32_t n_threads;  /* CPU threads; 0: every core this process may run on */
    int gpu;            /* 1: both models on the first CUDA device (needs a CUDA build and a
                           GPU; sd_queue runs on the CPU only); 0: the CPU */
    /* Notes for the user (a context that was capped, ...): one line each, no newline;
     * NULL: none. */
    void (*log)(void *user, const char *line);
    void *log_user;
} sd_context_params;

/* target NULL, draft NULL, n_ctx 0, n_threads 0, gpu 0, log NULL. */
sd_context_params sd_context_default_params(void);

/*
 * Load p->target (and p->draft), check that they pair, and make what one completion
 * needs (a KV cache of n_ctx positions for each model, F16). *out is NULL on failure.
 * Errors: SD_ERR_ARG (p or out NULL, no target), SD_ERR_IO (a file that cannot be read,
 * named), SD_ERR_FORMAT / SD_ERR_UNSUPPORTED (a file specdec cannot run, naming the key
 * or tensor), SD_ERR_MISMATCH (draft and target vocabularies differ: both files named),
 * SD_ERR_OOM.
 */
int sd_context_init(const sd_context_params *p, sd_context **out, sd_error *err);
/* Free the context (NULL accepted). Free its queues first. */
void sd_context_free(sd_context *ctx);

int32_t sd_context_n_ctx(const sd_context *ctx); /* positions of the context in use */
int sd_context_has_draft(const sd_context *ctx); /* 1 with a draft model */

/* ---- tokens and text ---- */

int32_t sd_n_vocab(const sd_context *ctx);   /* ids are 0 .. sd_n_vocab - 1 */
int32_t sd_token_bos(const sd_context *ctx); /* -1 if the vocabulary has none */
int32_t sd_token_eos(const sd_context *ctx); /* -1 if the vocabulary has none */

/*
 * Tokenize text[0 .. len) (UTF-8) as the model's tokenizer does; add_bos 1: with BOS
 * (and EOS) where the vocabulary asks for them. ids: int32 [cap]; *n receives the number
 * of ids of the text, also when it exceeds cap (then nothing past cap is written and
 * SD_ERR_ARG says how many are needed: call again with a larger buffer).
 * Errors: SD_ERR_ARG (NULL arguments, cap too small), SD_ERR_OOM.
 */
int sd_tokenize(const sd_context *ctx, const char *text, size_t len, int add_bos, int32_t *ids,
                int32_t cap, int32_t *n, sd_error *err);

/* The bytes one token stands for (control tokens: ""). Writes at most cap bytes to buf
 * (not NUL-terminated) and returns the full length, or -1 if id is out of range. */
int sd_token_to_piece(const sd_context *ctx, int32_t id, char *buf, size_t cap);

/* ---- one completion ---- */

/* Stop strings of one request (sd_queue). */
#define SD_MAX_STOP_STRINGS 8

typedef struct sd_completion_params {
    int32_t n_predict; /* most tokens to emit, >= 1; 128 */
    /* K: tokens drafted per pass, 0 .. SD_MAX_DRAFT (0: target alone; adaptive: the
     * most); 4 */
    int32_t n_draft;
    /* The proposer: NULL or "auto" (the draft model if the context has one, else
     * none), "none", "llm" (the draft model), "ngram" (prompt lookup), "ngram+llm",
     * "suffix" (suffix-structure drafting), "suffix+llm" (chained: a lookup match
     * continued by the draft model). */
    const char *draft_type;
    /* 1: K chosen per pass from measured acceptance and costs, speculation switched off
     * while it does not pay (the output is the same for every K with greedy decoding and
     * the default sampling); 0: K = n_draft every pass. 1 */
    int adaptive;
    float draft_p_min; /* the draft model stops proposing below this probability; 0.75 */
    /* Sampling (llama.cpp's meaning and defaults): temp <= 0 is greedy. */
    float temp;            /* 0.8 */
    int32_t top_k;         /* <= 0: off; 40 */
    float top_p;           /* >= 1: off; 0.95 */
    float min_p;           /* <= 0: off; 0 */
    float repeat_penalty;  /* 1: off; 1 */
    int32_t repeat_last_n; /* tokens the penalty looks back; 64 */
    uint64_t seed;         /* every random draw is keyed by (seed, position); 42 */
    int ignore_eos;        /* 1: the end of text is never emitted: run to n_predict; 0 */
    /* The prompt: 1: one user message (after `system`, if not NULL) formatted with the
     * model's chat template, then the assistant's header; 0: raw text with BOS. 0 */
    int chat;
    const char *system;
    /* Stop strings (sd_complete and sd_queue alike): the output ends before the first
     * appearance of one (at most SD_MAX_STOP_STRINGS, non-empty, copied); generation
     * stops after the pass that made it, with stop SD_STOP_STRING. */
    const char *const *stop;
    int32_t n_stop;
    /* A grammar the output must follow: GBNF text (llama.cpp's syntax, start rule "root";
     * NULL: none), applied exactly under speculation (the text is the constrained
     * target-alone text whatever the draft); a bad grammar is SD_ERR_FORMAT naming its
     * line and column; when nothing may follow, stop SD_STOP_GRAMMAR. NULL */
    const char *grammar;
} sd_completion_params;

/* The values above: the same defaults as `specdec generate`. */
sd_completion_params sd_completion_default_params(void);

/* A block of output: the ids emitted since the last piece and the text that became
 * final (UTF-8; bytes of a character split across tokens wait for its last byte; an
 * invalid sequence becomes U+FFFD). The last piece of a completion may have text and
 * no ids (what the detokenizer held back). Pointers valid during the callback only. */
typedef struct sd_piece {
    const int32_t *tokens;
    int32_t n_tokens;
    const char *text;
    size_t len;
} sd_piece;

/* Called with each piece, in order. Non-zero return stops the completion (stop reason
 * SD_STOP_NONE, status SD_OK). */
typedef int (*sd_piece_cb)(void *user, const sd_piece *piece);

/*
 * Complete prompt (NUL-terminated UTF-8) with p (NULL: the defaults): every emitted
 * block goes to cb (may be NULL) and the statistics to *stats (may be NULL). The KV
 * caches start empty at each call (no state is kept between completions).
 * Errors: SD_ERR_ARG (NULL ctx or prompt, a parameter out of range, naming it; an
 * unknown draft type; "llm" without a draft model, an empty stop string),
 * SD_ERR_UNSUPPORTED (a chat template specdec does not know), SD_ERR_CONTEXT (the prompt does not
 * fit the context), SD_ERR_OOM, a device error. Running out of context while generating is not an
 * error: stats->stop = SD_STOP_CONTEXT.
 */
int sd_complete(sd_context *ctx, const char *prompt, const sd_completion_params *p, sd_piece_cb cb,
                void *user, sd_gen_stats *stats, sd_error *err);

/* The same after prompt ids int32 [n_prompt] (n_prompt >= 1, e.g. just BOS); p->chat
 * and p->system are not used. */
int sd_complete_tokens(sd_context *ctx, const int32_t *prompt, int32_t n_prompt,
                       const sd_completion_params *p, sd_piece_cb cb, void *user,
                       sd_gen_stats *stats, sd_error *err);

/* ---- many completions at once: a queue ---- */

/*
 * A queue runs many requests over one context's models with its own KV caches: a pool
 * of blocks per model (shared prompt prefixes are cached and reused), n_parallel
 * sequences decoding at once, the others waiting. A request's output is the same alone
 * or beside any others (greedy, and sampled for a given seed), and the same as
 * sd_complete's for the same prompt and parameters with a fixed K. CPU only.
 */
typedef struct sd_queue sd_queue;

typedef struct sd_queue_params {
    int32_t n_parallel; /* requests decoding at once, 1 .. 4; 4 */
    int32_t n_ctx;      /* positions per request (prompt + output); 0: the context's */
    int32_t k_max;      /* largest n_draft a request may ask for, 1 .. SD_MAX_DRAFT; 8 */
    int32_t max_queue;  /* requests waiting beyond the running ones; 64 */
    int prefix_cache;   /* 1: a prompt reuses the cached blocks of earlier ones; 1 */
} sd_queue_params;

/* The values above. */
sd_queue_params sd_queue_default_params(void);

/* What a request emitted in one step, given to its callback. */
typedef struct sd_event {
    int64_t id;            /* the request's id (sd_queue_submit) */
    const int32_t *tokens; /* the ids emitted since the last event */
    int32_t n_tokens;
    const char *text; /* the text that became final (UTF-8; a stop string and what */
    size_t len;       /* follows it are never given; bytes that could start one wait) */
    int done;         /* 1: the request has ended (its last event); stop says why */
    sd_stop_reason stop;
    const sd_gen_stats *stats; /* the request's statistics so far (final when done) */
} sd_event;

/* Return non-zero to cancel the request (a done event with SD_STOP_CANCEL follows).
 * Runs on the stepping thread: it must not block nor call into the queue. Pointers are
 * valid during the callback only. */
typedef int (*sd_event_cb)(void *user, const sd_event *ev);

/*
 * Make a queue over ctx's models (ctx must outlive it). Errors: SD_ERR_ARG (p, ctx or
 * out NULL, a parameter out of range, naming it), SD_ERR_UNSUPPORTED (a context on a
 * GPU), SD_ERR_OOM (naming the KV pool).
 */
int sd_queue_init(sd_context *ctx, const sd_queue_params *p, sd_queue **out, sd_error *err);
/* Free the queue; requests still waiting or running end without a callback. NULL
 * accepted. */
void sd_queue_free(sd_queue *q);

/*
 * Queue prompt (NUL-terminated UTF-8; p NULL: the defaults; p->n_draft at most the
 * queue's k_max) with its callback (may be NULL); *id (may be NULL) receives the
 * request's id (ids ascend from 1). Nothing runs until sd_queue_step.
 * Errors: SD_ERR_ARG (bad parameters, naming them; an unknown draft type),
 * SD_ERR_CONTEXT (prompt + n_predict exceed the positions of a request),
 * SD_ERR_BUSY (max_queue requests are waiting), SD_ERR_OOM.
 */
int sd_queue_submit(sd_queue *q, const char *prompt, const sd_completion_params *p, sd_event_cb cb,
                    void *user, int64_t *id, sd_error *err);
/* The same after prompt ids int32 [n_prompt] (n_prompt >= 1; copied). */
int sd_queue_submit_tokens(sd_queue *q, const int32_t *prompt, int32_t n_prompt,
                           const sd_completion_params *p, sd_event_cb cb, void *user, int64_t *id,
                           sd_error *err);

/* Cancel a waiting or running request: its last event (SD_STOP_CANCEL) comes from the
 * next step. 0 if found, -1 if not (finished, or never there). */
int sd_queue_cancel(sd_queue *q, int64_t id);

/* Run one step: admit waiting requests while there is room, then one pass for every
 * running request (draft, verify, commit), calling the callbacks. Returns SD_OK (also
 * with nothing to do) or a model error, which ends the requests of that pass (a done
 * event with SD_STOP_NONE) and is returned once; the queue stays usable. */
int sd_queue_step(sd_queue *q, sd_error *err);

/* 1 while a request is waiting or running. */
int sd_queue_busy(sd_queue *q);

#ifdef __cplusplus
}
#endif
#endif /* SPECDEC_H */
