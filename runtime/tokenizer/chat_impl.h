/* runtime/tokenizer/chat_impl.h: what chat.c (built-in formatters) and chat_render.c (the
 * Jinja path) share. Private to runtime/tokenizer. */
#ifndef SD_CHAT_IMPL_H
#define SD_CHAT_IMPL_H

#include "runtime/tokenizer/sd_vocab.h"

/* 1 when a built-in formatter recognises the template text (or name) and formats it. */
int chat_builtin_recognises(const char *s);
/* The built-in formatters alone (sd_chat_apply without its Jinja path). */
int chat_apply_builtin(const char *tmpl, const sd_chat_msg *msgs, size_t n_msgs,
                       int add_generation_prompt, char **out, size_t *out_len, sd_error *err);
/* sd_chat_apply's Jinja path: the messages as JSON, rendered with SD_CHAT_JINJA. */
int chat_apply_jinja_msgs(const char *tmpl, const sd_chat_msg *msgs, size_t n_msgs,
                          int add_generation_prompt, char **out, size_t *out_len, sd_error *err);

#endif /* SD_CHAT_IMPL_H */
