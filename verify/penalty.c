/* verify/penalty.c: llama.cpp's repetition, frequency and presence penalties over a
 * window of the history (see sd_penalize in sd_sample.h), and the logit biases
 * (sd_logit_bias_apply). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "verify/sd_sample.h"

int sd_penalties_on(const sd_sampling_params *sp) {
    if (sp->repeat_last_n <= 0) return 0;
    const int repeat = sp->repeat_penalty > 0.0f && sp->repeat_penalty != 1.0f;
    return repeat || sp->freq_penalty != 0.0f || sp->presence_penalty != 0.0f;
}

void sd_logit_bias_apply(const sd_sampling_params *sp, float *logits, int32_t n_vocab,
                         const int32_t *col_of) {
    for (int32_t i = 0; i < sp->n_logit_bias; i++) {
        const sd_logit_bias *b = &sp->logit_bias[i];
        if (b->id < 0 || b->id >= n_vocab) continue;
        const int32_t col = col_of ? col_of[b->id] : b->id;
        if (col < 0) continue;
        if (b->bias <= SD_LOGIT_BIAS_MIN)
            logits[col] = -INFINITY;
        else
            logits[col] += b->bias;
    }
}

static int cmp_i32(const void *a, const void *b) {
    const int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

void sd_penalize(const sd_sampling_params *sp, const int32_t *hist_a, int32_t n_a,
                 const int32_t *hist_b, int32_t n_b, float *logits, int32_t n_vocab,
                 const int32_t *col_of) {
    if (!sd_penalties_on(sp)) return;
    int32_t w = sp->repeat_last_n < SD_PENALTY_MAX_N ? sp->repeat_last_n : SD_PENALTY_MAX_N;
    if (n_a < 0) n_a = 0;
    if (n_b < 0) n_b = 0;
    if ((int64_t)n_a + n_b < w) w = n_a + n_b;
    /* The window: the last w tokens of a ++ b, sorted so equal ids form runs. */
    int32_t win[SD_PENALTY_MAX_N];
    const int32_t from_b = n_b < w ? n_b : w, from_a = w - from_b;
    if (from_a) memcpy(win, hist_a + n_a - from_a, (size_t)from_a * sizeof *win);
    if (from_b) memcpy(win + from_a, hist_b + n_b - from_b, (size_t)from_b * sizeof *win);
    qsort(win, (size_t)w, sizeof *win, cmp_i32);
    const int repeat = sp->repeat_penalty > 0.0f && sp->repeat_penalty != 1.0f;
    for (int32_t i = 0; i < w;) {
        int32_t j = i;
        while (j < w && win[j] == win[i])
            j++;
        const int32_t id = win[i], c = j - i;
        i = j;
        if (id < 0 || id >= n_vocab) continue;
        const int32_t col = col_of ? col_of[id] : id;
        if (col < 0) continue;
        float l = logits[col];
        if (repeat) l = l <= 0.0f ? l * sp->repeat_penalty : l / sp->repeat_penalty;
        l -= (float)c * sp->freq_penalty + sp->presence_penalty;
        logits[col] = l;
    }
}
