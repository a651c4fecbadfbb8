/*
 * specdec tokenize: the token ids of a text under a model's vocabulary, as llama.cpp's
 * llama-tokenize prints them.
 *
 *   specdec tokenize -m FILE.gguf (-p TEXT | -f FILE) [--no-bos] [--ids | --pieces]
 *                    [--show-count]
 * --ids (the default): the ids on one line, separated by spaces.
 * --pieces: one token a line, "%6d -> 'piece'" (the piece as text, SentencePiece's "▁"
 * as a space: sd_vocab_token_to_piece), as llama-tokenize prints.
 * --show-count: a last line "tokens N".
 * --special: control-token texts in the text (<|im_start|>, <s>) are those tokens, as
 * llama-tokenize does by default; the default here is text, as generate's (llama-tokenize's
 * --no-parse-special, accepted).
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools/tools.h"
#include "runtime/gguf/sd_gguf.h"
#include "runtime/tokenizer/sd_vocab.h"

#define HINT "see 'specdec tokenize --help'"

static int usage_error(const char *fmt, const char *arg) {
    return sd_cli_usage(HINT, fmt, arg);
}

typedef struct tok_opts {
    const char *model, *text, *file;
    int no_bos, pieces, show_count, special;
} tok_opts;

static void tokenize_help(FILE *f) {
    fprintf(f, "usage: specdec tokenize -m FILE.gguf (-p TEXT | -f FILE) [options]\n"
               "  -m, --model FILE          the model whose vocabulary tokenizes\n"
               "  -p, --prompt TEXT         the text\n"
               "  -f, --file FILE           the text from a file (--prompt-file too)\n"
               "  --no-bos                  do not prepend BOS\n"
               "  --ids                     ids on one line (the default)\n"
               "  --pieces                  one token a line: \"id -> 'piece'\" (llama-tokenize)\n"
               "  --show-count              a last line \"tokens N\"\n"
               "  --special                 control tokens written in the text (<|im_start|>)\n"
               "                            are tokens (llama-tokenize's default); without it\n"
               "                            they are text, as in generate (--no-parse-special)\n"
               "  --log-disable             accepted (tokenize prints no notes)\n");
}

enum {
    OPT_NO_BOS = 1000,
    OPT_IDS,
    OPT_PIECES,
    OPT_SHOW_COUNT,
    OPT_LOG_DISABLE,
    OPT_SPECIAL,
    OPT_NO_SPECIAL
};

/* 0, -1 (help printed: exit 0) or a usage status. */
static int tokenize_parse(int argc, char **argv, tok_opts *o) {
    static const struct option opts[] = {
        {"model", required_argument, 0, 'm'},
        {"prompt", required_argument, 0, 'p'},
        {"file", required_argument, 0, 'f'},
        {"prompt-file", required_argument, 0, 'f'},
        {"no-bos", no_argument, 0, OPT_NO_BOS},
        {"ids", no_argument, 0, OPT_IDS},
        {"pieces", no_argument, 0, OPT_PIECES},
        {"show-count", no_argument, 0, OPT_SHOW_COUNT},
        {"log-disable", no_argument, 0, OPT_LOG_DISABLE},
        {"special", no_argument, 0, OPT_SPECIAL},
        {"parse-special", no_argument, 0, OPT_SPECIAL},
        {"no-parse-special", no_argument, 0, OPT_NO_SPECIAL},
        {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0},
    };
    memset(o, 0, sizeof *o);
    int rc = sd_cli_prescan(&argc, argv, ":m:p:f:h", opts, HINT);
    if (rc) return rc;
    int c;
    opterr = 0;
    optind = 1;
    while ((c = getopt_long(argc, argv, ":m:p:f:h", opts, NULL)) != -1) {
        switch (c) {
        case 'm':
            o->model = optarg;
            break;
        case 'p':
            o->text = optarg;
            break;
        case 'f':
            o->file = optarg;
            break;
        case OPT_NO_BOS:
            o->no_bos = 1;
            break;
        case OPT_IDS:
        case OPT_PIECES:
            o->pieces = c == OPT_PIECES;
            break;
        case OPT_SHOW_COUNT:
            o->show_count = 1;
            break;
        case OPT_LOG_DISABLE:
            break;
        case OPT_SPECIAL:
        case OPT_NO_SPECIAL:
            o->special = c == OPT_SPECIAL;
            break;
        case 'h':
            tokenize_help(stdout);
            return -1;
        case ':':
            return usage_error("option '%s' needs a value", argv[optind - 1]);
        default:
            return usage_error("unknown option '%s'", argv[optind - 1]);
        }
    }
    if (optind < argc) return usage_error("unexpected argument '%s'", argv[optind]);
    if (!o->model) return usage_error("%s", "tokenize: -m FILE.gguf is required");
    if (!!o->text == !!o->file)
        return usage_error("%s", "tokenize: give exactly one of -p TEXT or -f FILE");
    return 0;
}

/* Print ids[0 .. n) as the options ask. */
static int tokenize_print(const tok_opts *o, const sd_vocab *v, const int32_t *ids, size_t n,
                          sd_error *err) {
    if (!o->pieces) {
        for (size_t i = 0; i < n; i++)
            printf(i ? " %d" : "%d", ids[i]);
        printf("\n");
    }
    size_t cap = 64;
    char *buf = o->pieces ? malloc(cap) : NULL;
    for (size_t i = 0; o->pieces && i < n; i++) {
        int len = buf ? sd_vocab_token_to_piece(v, ids[i], 0, buf, cap) : 0;
        if (buf && len >= 0 && (size_t)len > cap) {
            char *nb = realloc(buf, (size_t)len);
            if (nb) len = sd_vocab_token_to_piece(v, ids[i], 0, nb, cap = (size_t)len);
            buf = nb;
        }
        if (!buf) return sd_errorf(err, SD_ERR_OOM, "tokenize: out of memory");
        printf("%6d -> '%.*s'\n", ids[i], len > 0 ? len : 0, buf);
    }
    free(buf);
    if (o->show_count) printf("tokens %zu\n", n);
    return SD_OK;
}

int sd_cmd_tokenize(int argc, char **argv) {
    tok_opts o;
    int prc = tokenize_parse(argc, argv, &o);
    if (prc) return prc < 0 ? EXIT_SUCCESS : prc;
    sd_error err = {0};
    char *buf = NULL;
    const char *text = o.text;
    size_t len = text ? strlen(text) : 0;
    sd_gguf *g = NULL;
    sd_vocab *v = NULL;
    int32_t *ids = NULL;
    size_t n = 0;
    int rc = SD_OK;
    if (o.file && !(rc = sd_cli_read_file(o.file, &buf, &len, &err))) text = buf;
    if (!rc) rc = sd_gguf_open(o.model, &g, &err);
    if (!rc) rc = sd_vocab_load(g, &v, &err);
    if (!rc)
        rc = sd_vocab_tokenize(v, text, len,
                               (o.no_bos ? 0 : SD_VOCAB_ADD_SPECIAL) |
                                   (o.special ? SD_VOCAB_PARSE_SPECIAL : 0),
                               &ids, &n, &err);
    if (!rc) rc = tokenize_print(&o, v, ids, n, &err);
    free(ids);
    sd_vocab_free(v);
    sd_gguf_close(g);
    free(buf);
    return rc ? sd_cli_fail(&err) : EXIT_SUCCESS;
}
