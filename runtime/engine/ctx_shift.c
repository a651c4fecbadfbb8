/*
 * runtime/engine/ctx_shift.c: llama.cpp's context shift, the arithmetic both clients
 * share (generate --context-shift, tools/cmd_generate.c, and serve --context-shift,
 * runtime/server/api.c): how many first tokens stay, and the window after a shift.
 */
#include <string.h>

#include "runtime/engine/sd_engine.h"

int32_t sd_ctx_shift_keep(const int32_t *prompt, int32_t n_prompt, int64_t keep, int32_t bos) {
    int32_t n_keep = keep < 0 || keep > n_prompt ? n_prompt : (int32_t)keep;
    /* BOS is kept besides the N tokens, as llama.cpp does */
    if (n_prompt > 0 && prompt[0] == bos && keep >= 0 && n_keep < n_prompt) n_keep++;
    return n_keep;
}

int32_t sd_ctx_shift_window(int32_t *win, int32_t n_cur, int32_t n_keep) {
    if (n_keep < 0 || n_keep >= n_cur) return 0;
    const int32_t n_discard = (n_cur - n_keep) / 2;
    memmove(win + n_keep, win + n_keep + n_discard,
            (size_t)(n_cur - n_keep - n_discard) * sizeof *win);
    return n_discard;
}
