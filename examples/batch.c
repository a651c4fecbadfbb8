/*
 * examples/batch.c: several prompts at once through one queue (continuous batching):
 * submit them all, step until nothing is busy, print each request's text and statistics.
 * Uses the public face only (include/specdec.h).
 *
 *   batch TARGET.gguf [DRAFT.gguf] [PROMPT ...]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "specdec.h"

#define MAX_REQ 8

/* One request's output, filled by its callback. */
typedef struct request {
    char text[4096];
    size_t len;
    int done;
    sd_gen_stats st;
} request;

static int on_event(void *user, const sd_event *ev) {
    request *r = user;
    size_t n = ev->len;
    if (n > sizeof r->text - 1 - r->len) n = sizeof r->text - 1 - r->len;
    memcpy(r->text + r->len, ev->text, n);
    r->len += n;
    r->text[r->len] = '\0';
    if (ev->done) {
        r->done = 1;
        r->st = *ev->stats; /* final statistics */
    }
    return 0; /* non-zero would cancel the request */
}

int main(int argc, char **argv) {
    static const char *defaults[] = {"Once upon a time", "The little dog", "Lily and Tom"};
    if (argc < 2) {
        fprintf(stderr, "usage: %s TARGET.gguf [DRAFT.gguf] [PROMPT ...]\n", argv[0]);
        return 2;
    }
    sd_context_params cp = sd_context_default_params();
    cp.target = argv[1];
    cp.draft = argc > 2 ? argv[2] : NULL;
    const char *const *prompts = argc > 3 ? (const char *const *)argv + 3 : defaults;
    int n = argc > 3 ? argc - 3 : 3;
    if (n > MAX_REQ) n = MAX_REQ;

    sd_error err = {0};
    sd_context *ctx = NULL;
    sd_queue *q = NULL;
    static request req[MAX_REQ];
    int rc = 1;
    if (sd_context_init(&cp, &ctx, &err) != SD_OK) goto out;
    sd_queue_params qp = sd_queue_default_params();
    qp.n_parallel = 2; /* two decode at once; the others wait for a slot */
    if (sd_queue_init(ctx, &qp, &q, &err) != SD_OK) goto out;

    sd_completion_params p = sd_completion_default_params();
    p.n_predict = 48;
    p.temp = 0.0f;
    p.adaptive = 0; /* K = n_draft every pass (adaptive: the controller may switch it off) */
    for (int i = 0; i < n; i++)
        if (sd_queue_submit(q, prompts[i], &p, on_event, &req[i], NULL, &err) != SD_OK) goto out;
    int steps = 0;
    while (sd_queue_busy(q)) {
        if (sd_queue_step(q, &err) != SD_OK) goto out;
        steps++;
    }
    for (int i = 0; i < n; i++) {
        const sd_gen_stats *s = &req[i].st;
        printf("[%d] %s%s\n", i, prompts[i], req[i].text);
        printf("[%d] %d tokens (%s), %d passes, acceptance %.3f, tokens/pass %.3f\n", i,
               s->n_generated, sd_stop_reason_str(s->stop), s->n_target_passes,
               sd_stats_acceptance_rate(s), sd_stats_tokens_per_pass(s));
    }
    printf("%d requests in %d steps\n", n, steps);
    rc = 0;
out:
    if (rc) fprintf(stderr, "batch: %s\n", err.msg);
    sd_queue_free(q);
    sd_context_free(ctx);
    return rc;
}
