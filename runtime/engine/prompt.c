/* runtime/engine/prompt.c: a prompt (raw text, or chat messages in the chat template) to
 * token ids (see sd_engine.h). The server, generate and bench (both modes) tokenize
 * through it; the chat loop (tools/chat_loop.c) tokenizes only what a turn appends to
 * the conversation's text, a different operation, with sd_vocab_tokenize. */
#include <stdlib.h>

#include "runtime/engine/sd_engine.h"

int sd_prompt_tokenize(const sd_vocab *v, const sd_prompt_spec *p, int32_t **ids, int32_t *n,
                       sd_error *err) {
    *ids = NULL;
    *n = 0;
    if (!p || (!p->text) == (!p->messages))
        return sd_errorf(err, SD_ERR_ARG, "prompt: give either text or chat messages");
    unsigned flags = p->no_bos ? 0 : SD_VOCAB_ADD_SPECIAL;
    const char *text = p->text;
    size_t len = p->len;
    char *chat = NULL;
    if (p->messages) {
        if (p->n_messages == 0) return sd_errorf(err, SD_ERR_ARG, "prompt: no chat messages");
        const char *tmpl = p->tmpl ? p->tmpl : sd_vocab_chat_template(v);
        if (!tmpl)
            return sd_errorf(err, SD_ERR_UNSUPPORTED,
                             "the model has no tokenizer.chat_template: name a template (one of "
                             "%s)",
                             sd_chat_template_names());
        int rc = sd_chat_apply(tmpl, p->messages, p->n_messages, 1, &chat, &len, err);
        if (rc) {
            if (!p->tmpl) sd_error_prefix(err, rc, "tokenizer.chat_template");
            return rc;
        }
        text = chat;
        flags |= SD_VOCAB_PARSE_SPECIAL; /* the template's control tokens */
    } else if (p->special) {
        flags |= SD_VOCAB_PARSE_SPECIAL;
    }
    size_t n_ids = 0;
    int rc = sd_vocab_tokenize(v, text, len, flags, ids, &n_ids, err);
    free(chat);
    if (rc) return rc;
    if (n_ids == 0 || n_ids > INT32_MAX) {
        free(*ids);
        *ids = NULL;
        return sd_errorf(err, SD_ERR_ARG,
                         n_ids ? "prompt: too many tokens"
                               : "empty prompt and no BOS token: nothing to condition on");
    }
    *n = (int32_t)n_ids;
    return SD_OK;
}
