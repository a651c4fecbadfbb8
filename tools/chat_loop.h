/*
 * The interactive chat of `specdec generate --chat` (llama.cpp's llama-cli -cnv): turns read
 * from a stream (a terminal or a pipe), each formatted with the chat template and answered
 * by speculative generation, the KV caches of the earlier turns kept (tools/chat_loop.c).
 * Private to tools/.
 */
#ifndef SD_CLI_CHAT_LOOP_H
#define SD_CLI_CHAT_LOOP_H

#include <stdint.h>
#include <stdio.h>

#include "runtime/base/sd_base.h"
#include "runtime/engine/sd_engine.h"

typedef struct sd_cli_chat {
    sd_engine *engine;
    sd_gen_params gen;       /* every answer's settings; gen.n_predict is ignored (max_tokens) */
    int32_t max_tokens;      /* most tokens of one answer; -1: to its end of turn or the context */
    const char *tmpl;        /* the template: a built-in name or the model's Jinja text */
    const char *tmpl_origin; /* prefix of a template error ("FILE: tokenizer.chat_template") */
    const char *system;      /* a system message, or NULL */
    const char *first;       /* the first user message (from -p / -f), or NULL */
    int add_bos;             /* the first turn's tokens start with BOS as the vocabulary asks */
    int escape;              /* process \n \t ... in each line read (sd_cli_unescape) */
    int notes;               /* statistics per turn (and notes) on stderr */
    int echo_first;          /* print the first message as "> TEXT" before its answer */
    FILE *in;                /* the turns: one a line; a line ending in '\' continues */
    int prompt;              /* print "> " before each read (in is a terminal) */
    /* --context-shift: a conversation that fills the context keeps its first keep tokens
     * and drops the older half of the rest (the target's cache shifted, keys re-rotated:
     * the one-slot batcher's prefix cache, sd_engine_shift_cached), before an answer or
     * during one; an answer then ends at its end
     * of turn, max_tokens, or n_ctx tokens. 0: a full context ends the chat with an error. */
    int context_shift;
    int32_t keep;
    /* Optional: after each answer, the turn (1, 2, ...), the prompt's tokens (the whole
     * conversation before the answer), the answer's, those of the prompt the KV cache
     * already held, and the conversation after the answer, conv int32 [n_conv] (the prompt
     * then the answer: n_conv = n_prompt + n_answer unless a context shift came during
     * the answer). */
    void (*turn_done)(void *user, int turn, int32_t n_prompt, int32_t n_answer, int32_t n_cached,
                      const int32_t *conv, int32_t n_conv);
    void *turn_user;
} sd_cli_chat;

/*
 * Run the conversation until end of input, a line "/exit" (or "/quit"), or Ctrl-C while a
 * line is read; Ctrl-C during an answer stops that answer only (sd_cli_interrupt_catch
 * must be installed). Answers stream to stdout; statistics per turn go to stderr. The
 * conversation's tokens (every turn's formatted prompt and answer) are returned in a
 * malloc'd *conv of *n_conv ids for the caller (the lookup cache), also on error.
 * *by_interrupt is 1 when Ctrl-C ended it. Returns SD_OK, or an sd_status with err set (the
 * conversation no longer fits the context, a template or model error, a write error on
 * stdout).
 */
int sd_cli_chat_run(const sd_cli_chat *c, int32_t **conv, int32_t *n_conv, int *by_interrupt,
                    sd_error *err);

#endif /* SD_CLI_CHAT_LOOP_H */
