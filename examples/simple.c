/*
 * examples/simple.c: load a target and a draft model, complete one prompt, print the text
 * as it comes and the statistics. Uses the public face only (include/specdec.h).
 *
 *   simple TARGET.gguf [DRAFT.gguf] [PROMPT]
 *   simple models/tinystories-target-q8_0.gguf models/tinystories-draft-q8_0.gguf "Once upon a
 * time"
 */
#include <stdio.h>
#include <stdlib.h>

#include "specdec.h"

/* Called with each block of emitted tokens: print its text at once. */
static int print_piece(void *user, const sd_piece *piece) {
    (void)user;
    fwrite(piece->text, 1, piece->len, stdout);
    fflush(stdout);
    return 0; /* non-zero would stop the completion */
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s TARGET.gguf [DRAFT.gguf] [PROMPT]\n", argv[0]);
        return 2;
    }
    sd_context_params cp = sd_context_default_params();
    cp.target = argv[1];
    cp.draft = argc > 2 ? argv[2] : NULL;
    const char *prompt = argc > 3 ? argv[3] : "Once upon a time";

    sd_error err = {0};
    sd_context *ctx = NULL;
    if (sd_context_init(&cp, &ctx, &err) != SD_OK) {
        fprintf(stderr, "simple: %s\n", err.msg);
        return 1;
    }

    sd_completion_params p = sd_completion_default_params();
    p.n_predict = 64;
    p.temp = 0.0f; /* greedy: the same text as the target model alone */
    p.n_draft = 4; /* K: tokens the draft proposes per target pass */

    sd_gen_stats st;
    printf("%s", prompt);
    if (sd_complete(ctx, prompt, &p, print_piece, NULL, &st, &err) != SD_OK) {
        fprintf(stderr, "\nsimple: %s\n", err.msg);
        sd_context_free(ctx);
        return 1;
    }
    printf("\n\ntokens          %d (stop: %s)\n", st.n_generated, sd_stop_reason_str(st.stop));
    printf("target passes   %d\n", st.n_target_passes);
    printf("drafted         %d, accepted %d (acceptance %.3f)\n", st.n_drafted, st.n_accepted,
           sd_stats_acceptance_rate(&st));
    printf("tokens/pass     %.3f\n", sd_stats_tokens_per_pass(&st));
    printf("speed           %.1f tokens/s (decode)\n", sd_stats_tokens_per_s(&st));
    sd_context_free(ctx);
    return 0;
}
