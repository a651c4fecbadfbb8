/*
 * Tokenizer benchmark (built and run by scripts/bench_tokenize.sh; not a test).
 * usage: bench_tokenize VOCAB.gguf TEXT_FILE... ; prints one JSON object per line:
 *   load: {"vocab": V, "what": "load", "ms": best of 5 (open + sd_vocab_load)}
 *   each text: {"vocab": V, "what": FILE, "bytes": N, "tokens": N, "ms": best of 5,
 *               "mb_per_s": bytes / best time}
 * Times are wall clock (sd_time_ms) in one process, so the load is not counted in the
 * tokenize times; best-of-5 keeps a shared machine's noise down.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/gguf/sd_gguf.h"
#include "runtime/tokenizer/sd_vocab.h"

#define REPS 5

static char *read_all(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 16, len = 0;
    char *b = malloc(cap);
    for (size_t r; b && (r = fread(b + len, 1, cap - len, f)) > 0;) {
        len += r;
        if (len == cap) b = realloc(b, cap *= 2);
    }
    fclose(f);
    *n = len;
    return b;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: bench_tokenize VOCAB.gguf TEXT_FILE...\n");
        return 2;
    }
    sd_error err = {0};
    sd_vocab *v = NULL;
    double best = 1e30;
    for (int r = 0; r < REPS; r++) {
        sd_gguf *g = NULL;
        double t0 = sd_time_ms();
        if (sd_gguf_open(argv[1], &g, &err) || sd_vocab_load(g, &v, &err)) {
            fprintf(stderr, "%s\n", err.msg);
            return 1;
        }
        double t = sd_time_ms() - t0;
        sd_gguf_close(g);
        if (t < best) best = t;
        if (r + 1 < REPS) sd_vocab_free(v);
    }
    const char *name = strrchr(argv[1], '/') ? strrchr(argv[1], '/') + 1 : argv[1];
    printf("{\"vocab\": \"%s\", \"what\": \"load\", \"tokens\": %d, \"ms\": %.2f}\n", name,
           (int)sd_vocab_n_tokens(v), best);
    for (int a = 2; a < argc; a++) {
        size_t len = 0, n = 0;
        char *text = read_all(argv[a], &len);
        if (!text) {
            fprintf(stderr, "cannot read %s\n", argv[a]);
            return 1;
        }
        best = 1e30;
        for (int r = 0; r < REPS; r++) {
            int32_t *ids = NULL;
            double t0 = sd_time_ms();
            if (sd_vocab_tokenize(v, text, len, 0, &ids, &n, &err)) {
                fprintf(stderr, "%s\n", err.msg);
                return 1;
            }
            double t = sd_time_ms() - t0;
            free(ids);
            if (t < best) best = t;
        }
        const char *f = strrchr(argv[a], '/') ? strrchr(argv[a], '/') + 1 : argv[a];
        printf("{\"vocab\": \"%s\", \"what\": \"%s\", \"bytes\": %zu, \"tokens\": %zu, \"ms\": "
               "%.2f, \"mb_per_s\": %.2f}\n",
               name, f, len, n, best, best > 0 ? len / 1e3 / best : 0.0);
        free(text);
    }
    sd_vocab_free(v);
    return 0;
}
