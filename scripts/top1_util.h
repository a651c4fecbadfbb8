/* The parts scripts/llamacpp_logits.c and scripts/specdec_top1.c share: reading the token
 * ids of IDS.txt and the top two ids of a row of logits. Static functions, plain C11 and
 * stdio only (llamacpp_logits.c is built against llama.cpp's headers, not specdec's). */
#ifndef SD_SCRIPTS_TOP1_UTIL_H
#define SD_SCRIPTS_TOP1_UTIL_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

/* The most ids IDS.txt may hold (a context of that many positions is made for them). */
#define TOP1_MAX_IDS 1000000

/* The whitespace-separated token ids of path (malloc'd; *n_out their count), or NULL with
 * a line on stderr (prog: the program's name) when the file cannot be read, holds no ids
 * or more than TOP1_MAX_IDS. */
static int32_t *top1_read_ids(const char *prog, const char *path, size_t *n_out) {
    FILE *f = fopen(path, "r");
    if (!f) {
        perror(path);
        return NULL;
    }
    size_t cap = 4096, n = 0;
    int32_t *ids = malloc(sizeof *ids * cap);
    int v;
    while (ids && n <= TOP1_MAX_IDS && fscanf(f, "%d", &v) == 1) {
        if (n == cap) {
            cap *= 2;
            int32_t *t = realloc(ids, sizeof *ids * cap);
            if (!t) {
                free(ids);
                ids = NULL;
                break;
            }
            ids = t;
        }
        ids[n++] = v;
    }
    fclose(f);
    if (!ids || n == 0 || n > TOP1_MAX_IDS) {
        fprintf(stderr, "%s: no ids (or too many) in %s\n", prog, path);
        free(ids);
        return NULL;
    }
    *n_out = n;
    return ids;
}

/* The largest and second-largest entries of row[0..n_vocab) (lowest id first on ties):
 * *t1, *t2 (-1 when n_vocab is 1). */
static void top1_top2(const float *row, int32_t n_vocab, int32_t *t1, int32_t *t2) {
    int32_t a = 0, b = -1;
    for (int32_t c = 1; c < n_vocab; c++) {
        if (row[c] > row[a]) {
            b = a;
            a = c;
        } else if (b < 0 || row[c] > row[b]) {
            b = c;
        }
    }
    *t1 = a;
    *t2 = b;
}

/* The command line of both programs, "PROG MODEL.gguf IDS.txt [N_BATCH]": the ids of
 * argv[2] (as top1_read_ids; *n_out their count) and *n_batch (default 250, also for a
 * value below 1), or NULL with a line on stderr (the usage when arguments are missing). */
static int32_t *top1_args(const char *prog, int argc, char **argv, int32_t *n_batch,
                          size_t *n_out) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s MODEL.gguf IDS.txt [N_BATCH]\n", prog);
        return NULL;
    }
    *n_batch = argc > 3 ? atoi(argv[3]) : 250;
    if (*n_batch < 1) *n_batch = 250;
    return top1_read_ids(prog, argv[2], n_out);
}

#endif
